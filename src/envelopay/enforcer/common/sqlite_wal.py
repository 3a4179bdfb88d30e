"""WAL checkpoints off the event loop's thread, for the enforcer's SQLite store.

In WAL mode with synchronous=NORMAL a commit appends its pages to the WAL and does not
fsync; the fsyncs come with the checkpoint, which SQLite runs inside whichever commit
pushes the WAL past `wal_autocheckpoint` pages: on the event loop's thread, stalling
every task for two fsyncs (milliseconds, tens of them on a busy disk; measured: a third
of the store's time per payment). A thread with its own connection checkpoints instead
(PASSIVE: it never waits for, nor blocks, a reader or the writer); the autocheckpoint
stays as a backstop at a higher mark, should the thread fall behind.
"""

from __future__ import annotations

import sqlite3
import threading

__all__ = ["BACKSTOP_PAGES", "Checkpointer"]

BACKSTOP_PAGES = 16_000  # 64 MiB of WAL at 4 KiB pages before a commit checkpoints itself


class Checkpointer:
    """Checkpoints the database at `path` every `interval` seconds until `stop()`."""

    def __init__(self, path: str, interval: float = 0.5) -> None:
        self.path = path
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="enforcer-wal-checkpoint", daemon=True)
        self._thread.start()

    def checkpoint(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """One PASSIVE checkpoint: (busy, WAL frames, frames checkpointed)."""
        row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(row[0]), int(row[1]), int(row[2])

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except sqlite3.Error:
            return  # the backstop autocheckpoint still runs
        try:
            while not self._stop.wait(self.interval):
                try:
                    self.checkpoint(conn)
                except sqlite3.Error:
                    continue  # busy or transient: the next round (or the backstop) catches up
        finally:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
