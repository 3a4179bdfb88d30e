"""The scale-out ledger: PostgreSQL through psycopg 3 and a psycopg_pool connection pool.

Many processes on many machines share one database. Every reservation is a single
`INSERT ... ON CONFLICT DO NOTHING RETURNING` (one winner, no read-then-write race);
the rows a step goes on to update are locked with `SELECT ... FOR UPDATE`. Schema
migrations are versioned in `ep_migrations` and applied under an advisory lock, so
several workers starting at once upgrade an existing database exactly once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from envelopay.errors import StoreError
from envelopay.ledger._sql import Executor, Row, SqlStore
from envelopay.ledger.schema import LATEST, MIGRATIONS, MIGRATIONS_TABLE, statements

__all__ = ["PostgresStore"]

_MIGRATION_LOCK = 0x65_70_6C_65  # "eple": one advisory lock id for schema changes


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class _Cursor(Executor):
    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self.cur = cur

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self.cur.execute(_pg(sql), params)
        if self.cur.description is None:
            return None
        row: Row | None = self.cur.fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.cur.execute(_pg(sql), params)
        return list(self.cur.fetchall())

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.cur.execute(_pg(sql), params)
        return self.cur.rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.cur.executemany(_pg(sql), rows)


class PostgresStore(SqlStore):
    lock_clause = " FOR UPDATE"

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4, migrate: bool = True) -> None:
        self.dsn = dsn
        try:
            self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                dsn, min_size=min_size, max_size=max_size, kwargs={"autocommit": True}, open=True
            )
            self.pool.wait(timeout=30)
        except (psycopg.Error, Exception) as exc:
            raise StoreError(f"cannot reach PostgreSQL ledger: {exc}") from exc
        if migrate:
            self.migrate()

    @contextmanager
    def write(self) -> Iterator[Executor]:
        try:
            with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield _Cursor(cur)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc

    @contextmanager
    def read(self) -> Iterator[Executor]:
        try:
            with self.pool.connection() as conn, conn.cursor() as cur:
                yield _Cursor(cur)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc

    def t(self, dt: datetime | None) -> Any:
        return dt

    def ut(self, value: Any) -> datetime:
        assert isinstance(value, datetime)
        return value

    def j(self, obj: Any) -> Any:
        return Jsonb(obj)

    def uj(self, value: Any) -> Any:
        return value

    def version(self) -> int:
        with self.write() as x:
            x.exec(MIGRATIONS_TABLE)
            row = x.one("SELECT MAX(version) FROM ep_migrations")
        return int(row[0] or 0) if row else 0

    def migrate(self, target: int = LATEST) -> int:
        with self.write() as x:
            x.exec("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            x.exec(MIGRATIONS_TABLE)
            row = x.one("SELECT MAX(version) FROM ep_migrations")
            current = int(row[0] or 0) if row else 0
            for version, name, sql in MIGRATIONS:
                if current < version <= target:
                    for stmt in statements(sql, "postgres"):
                        x.exec(stmt)
                    x.exec(
                        "INSERT INTO ep_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                        (version, name, datetime.now(UTC).isoformat()),
                    )
                    current = version
        return current

    def close(self) -> None:
        self.pool.close()
