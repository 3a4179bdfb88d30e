"""Counter-payments made for OFFERs, in the ledger: keyed by (our address, peer, offer id),
so a redo never pays twice, whichever process asks again — on PostgreSQL, whichever host.

The worker writes the attempt down around the rail call; envelopay.worker.counterpay
says when, and what `begin`'s three answers (new, paid, in doubt) mean.

The table belongs to its own component of the one migrator ("counterpay").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Literal

from envelopay.errors import ConfigError
from envelopay.ledger._sql_base import SqlBase
from envelopay.ledger.schema import JSON_TYPE, TIME_TYPE
from envelopay.persist import Dialect, Migrations, Step, migrate

__all__ = ["COUNTERPAY_MIGRATIONS", "Begin", "CounterPayBook"]

Begin = Literal["new", "paid", "in_doubt"]

_T, _J = TIME_TYPE, JSON_TYPE


def _v1(d: Dialect) -> list[str]:
    return [
        "CREATE TABLE IF NOT EXISTS ep_counterpay ("
        " local TEXT NOT NULL, peer TEXT NOT NULL, offer_id TEXT NOT NULL, status TEXT NOT NULL,"
        " accept " + _J[d] + ", created_at " + _T[d] + " NOT NULL, PRIMARY KEY (local, peer, offer_id))",
    ]


COUNTERPAY_MIGRATIONS = Migrations(
    "counterpay", (Step(1, "counter-payments", {"sqlite": _v1("sqlite"), "postgres": _v1("postgres")}),)
)


class CounterPayBook:
    """The counter-payments of one address on a ledger store (SqliteStore or
    PostgresStore); the table's steps are applied on open."""

    def __init__(self, store: object, *, local: str, clock: Callable[[], datetime]) -> None:
        if not isinstance(store, SqlBase):
            kind = type(store).__name__
            raise ConfigError(f"counter-payments need the SQLite or PostgreSQL ledger, not {kind}")
        self.store = store
        self.local = local
        self._clock = clock
        with store.write() as x:
            migrate(x, store.dialect, COUNTERPAY_MIGRATIONS, str(store.t(clock())))

    def begin(self, peer: str, offer_id: str) -> tuple[Begin, dict[str, Any] | None]:
        s = self.store
        with s.write() as x:
            made = x.exec(
                "INSERT INTO ep_counterpay (local, peer, offer_id, status, accept, created_at)"
                " VALUES (?, ?, ?, 'paying', NULL, ?) ON CONFLICT DO NOTHING",
                (self.local, peer, offer_id, s.t(self._clock())),
            )
            if made == 1:
                return "new", None
            row = x.one("SELECT status, accept FROM ep_counterpay"
                        " WHERE local = ? AND peer = ? AND offer_id = ?", (self.local, peer, offer_id))
        if row is not None and row["status"] == "paid" and row["accept"] is not None:
            return "paid", s.uj(row["accept"])
        return "in_doubt", None

    def paid(self, peer: str, offer_id: str, accept: dict[str, Any]) -> None:
        s = self.store
        with s.write() as x:
            x.exec("UPDATE ep_counterpay SET status = 'paid', accept = ?"
                   " WHERE local = ? AND peer = ? AND offer_id = ?",
                   (s.j(accept), self.local, peer, offer_id))

    def failed(self, peer: str, offer_id: str) -> None:
        with self.store.write() as x:
            x.exec("DELETE FROM ep_counterpay WHERE local = ? AND peer = ? AND offer_id = ?"
                   " AND status = 'paying'", (self.local, peer, offer_id))

    def take_in(self, rows: Iterable[tuple[str, str, str, dict[str, Any] | None]]) -> int:
        """Rows (peer, offer id, status, ACCEPT) kept elsewhere before (the per-host file
        of earlier versions), added where the ledger has none: a row already here is
        newer. Returns how many were added."""
        s, added, now = self.store, 0, self._clock()
        with s.write() as x:
            for peer, offer_id, status, accept in rows:
                added += x.exec(
                    "INSERT INTO ep_counterpay (local, peer, offer_id, status, accept, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (self.local, peer, offer_id, status, None if accept is None else s.j(accept), s.t(now)),
                )
        return added

    def close(self) -> None:
        return None  # the ledger is its owner's to close
