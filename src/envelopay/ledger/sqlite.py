"""The embedded default ledger: one SQLite file, safe under several processes.

WAL lets readers run beside the one writer; every write transaction starts with
BEGIN IMMEDIATE so it takes the write lock up front (no deadlocking upgrade from a
read lock), and busy_timeout makes the other processes wait their turn. With WAL,
synchronous=NORMAL keeps every commit across a process crash (SIGKILL); only a power
loss can take the last commits, which `synchronous="FULL"` trades speed to avoid.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from envelopay.errors import StoreError
from envelopay.ledger._sql import Executor, Row, SqlStore
from envelopay.ledger._sql_base import apply_migrations, ledger_version
from envelopay.ledger.compacted import digest, small_json
from envelopay.ledger.schema import LATEST

__all__ = ["SqliteStore"]


class _Cursor(Executor):
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        cur = self.conn.execute(sql, params)
        row: Row | None = cur.fetchone()
        cur.close()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return list(self.conn.execute(sql, params).fetchall())

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        return self.conn.executemany(sql, rows).rowcount


class SqliteStore(SqlStore):
    dialect = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout_ms: int = 60_000,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        migrate: bool = True,
        cache_mib: int = 64,
        mmap_mib: int = 256,
    ) -> None:
        self.path = str(path)
        self._lock = threading.RLock()
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout_ms / 1000
            )
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute(f"PRAGMA synchronous = {synchronous}")
            self._conn.execute("PRAGMA foreign_keys = OFF")
            self._conn.row_factory = sqlite3.Row  # rows by column name (envelopay.persist)
            # A step touches about a dozen B-trees; at a million flows their inner pages
            # no longer fit SQLite's default 2 MiB cache. 64 MiB (a ceiling, filled only as
            # used) and a memory-mapped file keep them resident.
            self._conn.execute(f"PRAGMA cache_size = {-int(cache_mib) * 1024}")
            self._conn.execute(f"PRAGMA mmap_size = {int(mmap_mib) * 1024 * 1024}")
            # The codecs compaction uses, as PostgreSQL has them in SQL (schema v10).
            self._conn.create_function("ep_digest", 1, digest, deterministic=True)
            self._conn.create_function("ep_small", 1, small_json, deterministic=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite ledger {self.path}: {exc}") from exc
        self._x = _Cursor(self._conn)
        if migrate:
            self.migrate()

    # -- hooks
    @contextmanager
    def write(self) -> Iterator[Executor]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"SQLite ledger: cannot begin: {exc}") from exc
            try:
                yield self._x
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            try:
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._conn.execute("ROLLBACK")
                raise StoreError(f"SQLite ledger: commit failed: {exc}") from exc

    @contextmanager
    def read(self) -> Iterator[Executor]:
        with self._lock:
            yield self._x  # autocommit mode: each statement sees a consistent snapshot

    def t(self, dt: datetime | None) -> Any:
        if dt is None:
            return None
        # One fixed format, so text order is time order.
        return dt.astimezone(UTC).isoformat(timespec="microseconds")

    def ut(self, value: Any) -> datetime:
        return datetime.fromisoformat(value)

    def j(self, obj: Any) -> Any:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"))

    def uj(self, value: Any) -> Any:
        return json.loads(value)

    # -- lifecycle
    def version(self) -> int:
        with self.write() as x:
            return ledger_version(x, "sqlite")

    def migrate(self, target: int = LATEST) -> int:
        with self.write() as x:
            return apply_migrations(x, "sqlite", target, self.t(datetime.now(UTC)))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
