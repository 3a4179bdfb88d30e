"""The send log and the loop guard: the same body to the same recipient is sent once
within a window.

Every hand-over to the send function is logged, one row per recipient, with the
verdict. Only a `sent` row counts for the guard: a failed, blocked or pending send may
be tried again at once. The log lives in the index file (table `sends`) and is not
derived data: it is the only memory of what was sent. `prune` ages it out (`envelopay
mail compact`), never inside the guard's window.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from envelopay.mail.mailbox.inputs import MailboxError
from envelopay.persist import Migrations, Step
from envelopay.persist.adapters import migrate_sqlite, recorded_sqlite

__all__ = ["SENDS_MIGRATIONS", "SendGuard", "body_hash"]

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS sends (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    ts REAL NOT NULL,
    status TEXT NOT NULL,
    message_id TEXT
)""",
    "CREATE INDEX IF NOT EXISTS sends_guard ON sends(recipient, body_hash, status, ts)",
)
# The send log's schema on the one migrator (envelopay.persist), in the index file's
# `ep_versions`. Step 1 is what every release before it ran at open (IF NOT EXISTS): a log
# one of them made is adopted by running it again.
SENDS_MIGRATIONS = Migrations("mailbox_sends", (Step(1, "the send log", {"sqlite": _SCHEMA}),))


def body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


class SendGuard:
    """`window` None disables the guard; the log is kept all the same."""

    def __init__(self, db: sqlite3.Connection, window: timedelta | None, now: Callable[[], datetime]) -> None:
        self._db = db
        self.window = window
        self._now = now
        if recorded_sqlite(db, SENDS_MIGRATIONS.component) < SENDS_MIGRATIONS.latest:
            migrate_sqlite(db, SENDS_MIGRATIONS, now().isoformat())

    def refuse_duplicate(self, recipient: str, body: str) -> None:
        """MailboxError `duplicate_send` when this body was sent to `recipient` in the window."""
        if self.window is None:
            return
        since = (self._now() - self.window).timestamp()
        (row,) = self._rows(
            "SELECT count(*) AS n FROM sends"
            " WHERE recipient = ? AND body_hash = ? AND status = 'sent' AND ts >= ?",
            (recipient.lower(), body_hash(body), since),
        )
        if row["n"] > 0:
            raise MailboxError(
                "duplicate_send",
                f"the same body was already sent to {recipient} within "
                f"{self.window}; change the message or wait",
                "message",
            )

    def log(self, recipients: Iterable[str], body: str, status: str, message_id: str) -> None:
        digest = body_hash(body)
        for r in recipients:
            self._db.execute(
                "INSERT INTO sends (recipient, body_hash, ts, status, message_id) VALUES (?,?,?,?,?)",
                (r, digest, self._now().timestamp(), status, message_id),
            )

    def prune(self, before: float, batch: int = 5_000) -> int:
        """Delete the log rows written before `before` (Unix time), oldest first, `batch`
        rows per statement (each its own transaction: a sender beside it waits for one
        batch, not the whole run). Rows are appended as they are written, so the walk
        stops at the first newer row and reads about what it removes; a row written under
        a clock set back waits for a later run."""
        removed = 0
        while True:
            rows = self._rows("SELECT seq, ts FROM sends ORDER BY seq LIMIT ?", (batch,))
            last = None
            for row in rows:
                if row["ts"] >= before:
                    break
                last = row["seq"]
            if last is None:
                return removed
            removed += self._db.execute("DELETE FROM sends WHERE seq <= ?", (last,)).rowcount
            if last != rows[-1]["seq"]:
                return removed

    def _rows(self, sql: str, params: tuple[object, ...]) -> list[sqlite3.Row]:
        """Rows by column name, whatever row factory the caller's connection has."""
        cur = self._db.cursor()
        cur.row_factory = sqlite3.Row
        return cur.execute(sql, params).fetchall()
