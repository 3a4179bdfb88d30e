"""Waiting messages (glossary, docs/DESIGN.md): inbound messages whose payment is found
but not yet final (or whose chain cannot be asked), kept in the ledger while the worker
waits for the chain. (Not "deferred": that is a message left for a retry shortly, in no
table, after a DKIM key lookup failed for now.)

A waiting message is neither answered nor spent: its inbound claim stays `claimed`
(with an expired lease, so any worker of the address may take it over, after a
restart too), its (sender, id) and its proof stay held by it, and a row here keeps
the raw message, when it was first seen, when to look again and when to give up.
The worker's wait loop takes due rows (`waiting_take`, which pushes each taken row's
`next_at` forward so two workers do not both take it) and hands the raw message to the
engine again. A row whose message got its outcome is skipped by `waiting_take` and
removed by `waiting_clear`.

`WaitingMixin` implements it for every `SqlStore` (SQLite and PostgreSQL) with the
portable SQL of schema v9 (its table is still named `ep_deferrals`: a released step).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from envelopay.ledger._sql_base import SqlBase

__all__ = ["WaitingMessage", "WaitingMixin", "WaitingStore"]


@dataclass(frozen=True, slots=True)
class WaitingMessage:
    local: str
    message_id: str
    raw: bytes
    first_seen: datetime
    next_at: datetime
    deadline: datetime
    attempts: int = 0
    last_status: str = ""  # the last verdict: "pending" | "unavailable"
    last_detail: str = ""


@runtime_checkable
class WaitingStore(Protocol):
    def waiting_put(self, waiting: WaitingMessage, *, worker: str, now: datetime) -> bool:
        """Record (or update) a waiting message and expire the message's lease; False when the
        message is not claimed any more (another worker finished it)."""
        ...

    def waiting_get(self, local: str, message_id: str) -> WaitingMessage | None: ...

    def waiting_take(
        self, local: str, now: datetime, hold_until: datetime, limit: int = 100
    ) -> list[WaitingMessage]:
        """Due waiting messages of `local` whose message is still unfinished, oldest due first;
        each taken row's `next_at` becomes `hold_until`."""
        ...

    def waiting_clear(self, local: str, message_id: str) -> None: ...

    def waiting_count(self, local: str) -> int: ...


_COLS = "local, message_id, raw, first_seen, next_at, deadline, attempts, last_status, last_detail"


class WaitingMixin(SqlBase):
    """The waiting messages' queries over a SqlStore's executor and value codecs."""

    def _waiting_row(self, row: Any) -> WaitingMessage:
        return WaitingMessage(
            str(row["local"]), str(row["message_id"]), base64.b64decode(row["raw"]),
            self.ut(row["first_seen"]), self.ut(row["next_at"]), self.ut(row["deadline"]),
            int(row["attempts"]),
            str(row["last_status"] or ""), str(row["last_detail"] or ""),
        )

    def waiting_put(self, waiting: WaitingMessage, *, worker: str, now: datetime) -> bool:
        d = waiting
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_inbound SET lease_until = ? WHERE local = ? AND message_id = ?"
                " AND status = 'claimed' AND worker = ?",
                (self.t(now), d.local, d.message_id, worker),
            )
            if n == 0:
                return False
            x.exec(
                f"INSERT INTO ep_deferrals ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (local, message_id) DO UPDATE SET next_at = excluded.next_at,"
                " attempts = excluded.attempts, last_status = excluded.last_status,"
                " last_detail = excluded.last_detail",
                (d.local, d.message_id, base64.b64encode(d.raw).decode("ascii"), self.t(d.first_seen),
                 self.t(d.next_at), self.t(d.deadline), d.attempts, d.last_status, d.last_detail[:500]),
            )
        return True

    def waiting_get(self, local: str, message_id: str) -> WaitingMessage | None:
        with self.read() as x:
            row = x.one(f"SELECT {_COLS} FROM ep_deferrals WHERE local = ? AND message_id = ?",
                        (local, message_id))
        return self._waiting_row(row) if row else None

    def waiting_take(
        self, local: str, now: datetime, hold_until: datetime, limit: int = 100
    ) -> list[WaitingMessage]:
        cols = ", ".join(f"d.{c.strip()}" for c in _COLS.split(","))
        taken: list[WaitingMessage] = []
        with self.write() as x:
            rows = x.all(
                f"SELECT {cols} FROM ep_deferrals d JOIN ep_inbound i"
                " ON i.local = d.local AND i.message_id = d.message_id"
                " WHERE d.local = ? AND d.next_at <= ? AND i.status = 'claimed'"
                " ORDER BY d.next_at LIMIT ?",
                (local, self.t(now), limit),
            )
            for row in rows:
                # Conditional on the value read: a concurrent taker gets 0 rows and skips it.
                n = x.exec(
                    "UPDATE ep_deferrals SET next_at = ? WHERE local = ? AND message_id = ? AND next_at = ?",
                    (self.t(hold_until), row["local"], row["message_id"], row["next_at"]),
                )
                if n:
                    taken.append(self._waiting_row(row))
        return taken

    def waiting_clear(self, local: str, message_id: str) -> None:
        with self.write() as x:
            x.exec("DELETE FROM ep_deferrals WHERE local = ? AND message_id = ?", (local, message_id))

    def waiting_count(self, local: str) -> int:
        with self.read() as x:
            row = x.one("SELECT count(*) AS n FROM ep_deferrals d JOIN ep_inbound i ON i.local = d.local"
                        " AND i.message_id = d.message_id WHERE d.local = ? AND i.status = 'claimed'",
                        (local,))
        return int(row["n"]) if row else 0
