"""Counter-payments made for OFFERs, keyed by (peer, offer id): a redo never pays twice.

Where the book lives: in the ledger (`envelopay.ledger.counterpay.CounterPayBook`) on
SQLite and PostgreSQL, so every process and host serving the address shares it; a file of
its own (`CounterPayments`, below) only beside a ledger of another kind. Rows an earlier
version kept in that file beside a SQL ledger are taken into the ledger once
(`take_in_file`).

The engine asks the worker to decide an OFFER between its two transactions; a worker
that dies after paying and before the engine's commit is asked again for the same
OFFER after a restart. The payment is therefore written down around the rail call:

    begin(peer, offer)  → "new"       : go on and pay
                        → "paid"      : the recorded ACCEPT is returned again (same proof)
                        → "in_doubt"  : a payment started and its outcome is unknown (the
                                        process died during rail.pay): refuse rather than
                                        risk paying twice; an operator settles it
    paid(peer, offer, accept)          : record the ACCEPT (proof included)
    failed(peer, offer)                : the rail refused (nothing moved): forget the attempt
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, Protocol

from envelopay.ledger.counterpay import Begin, CounterPayBook

__all__ = ["CounterPayer", "CounterPaymentBook", "CounterPayments", "take_in_file"]


class CounterPayer(Protocol):
    """Who pays a counter-leg when the worker holds no key: the spend enforcer
    (envelopay.enforcer.client.enforced_payer.EnforcedPayer). A redo with the same key pays once;
    a refusal is a RailError, an unreachable payer a TransportError."""

    async def pay_leg(
        self, *, chain: str, token: str, amount: int, recipient: str, payee: str, key: str
    ) -> dict[str, Any]: ...

class CounterPaymentBook(Protocol):
    """The book the worker writes a counter-payment in, around the rail call."""

    def begin(self, peer: str, offer_id: str) -> tuple[Begin, dict[str, Any] | None]: ...

    def paid(self, peer: str, offer_id: str, accept: dict[str, Any]) -> None: ...

    def failed(self, peer: str, offer_id: str) -> None: ...

    def close(self) -> None: ...

_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_counterpay (
    peer     TEXT NOT NULL,
    offer_id TEXT NOT NULL,
    status   TEXT NOT NULL,          -- paying | paid
    accept   TEXT,                   -- the ACCEPT body, once paid
    PRIMARY KEY (peer, offer_id)
);
"""


class CounterPayments:
    def __init__(self, path: str | Path) -> None:
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def begin(self, peer: str, offer_id: str) -> tuple[Begin, dict[str, Any] | None]:
        with self._lock:
            cur = self._db.execute(
                "INSERT INTO agent_counterpay (peer, offer_id, status) VALUES (?, ?, 'paying')"
                " ON CONFLICT DO NOTHING",
                (peer, offer_id),
            )
            if cur.rowcount == 1:
                return "new", None
            row = self._db.execute(
                "SELECT status, accept FROM agent_counterpay WHERE peer = ? AND offer_id = ?",
                (peer, offer_id),
            ).fetchone()
        if row is not None and row["status"] == "paid" and row["accept"]:
            return "paid", json.loads(row["accept"])
        return "in_doubt", None

    def paid(self, peer: str, offer_id: str, accept: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                "UPDATE agent_counterpay SET status = 'paid', accept = ? WHERE peer = ? AND offer_id = ?",
                (json.dumps(accept, sort_keys=True), peer, offer_id),
            )

    def failed(self, peer: str, offer_id: str) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM agent_counterpay WHERE peer = ? AND offer_id = ? AND status = 'paying'",
                (peer, offer_id),
            )


def take_in_file(book: CounterPayBook, path: Path) -> int:
    """The rows of an earlier version's per-host file, added to the ledger's book where it
    has none; the file is then renamed `*.taken-in` (kept, not read again). Returns how
    many were added; 0 when there is no such file."""
    if not path.exists():
        return 0
    db = sqlite3.connect(str(path), timeout=30)
    try:
        db.row_factory = sqlite3.Row
        rows = [(r["peer"], r["offer_id"], r["status"], json.loads(r["accept"]) if r["accept"] else None)
                for r in db.execute("SELECT peer, offer_id, status, accept FROM agent_counterpay")]
    except sqlite3.OperationalError:  # no such table: nothing was ever kept there
        rows = []
    finally:
        db.close()
    added = book.take_in(rows)
    with contextlib.suppress(FileNotFoundError):  # another process took it in first
        os.replace(path, path.with_name(path.name + ".taken-in"))
    return added
