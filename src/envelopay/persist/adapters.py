"""The migrator's transaction on each backend, for stores without an executor of their own
(the enforcer's async stores migrate through these, once, at open)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from envelopay.persist.migrator import Migrations, migrate
from envelopay.persist.rows import Record, named_row

__all__ = ["PgTx", "SqliteTx", "migrate_postgres", "migrate_sqlite", "pg_refusal", "recorded_sqlite"]


class SqliteTx:
    """Statements on one sqlite3 connection; rows by column name."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        cur = self.conn.cursor()
        cur.row_factory = sqlite3.Row
        return cur.execute(sql, tuple(params)).fetchall()

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        return self.conn.execute(sql, tuple(params)).rowcount


class PgTx:
    """Statements on one psycopg cursor made with `row_factory=named_row` (or dict_row)."""

    def __init__(self, cur: Any) -> None:
        self.cur = cur

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Record | dict[str, Any]]:
        self.cur.execute(sql.replace("?", "%s"), tuple(params))
        return list(self.cur.fetchall()) if self.cur.description is not None else []

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.cur.execute(sql.replace("?", "%s"), tuple(params))
        return int(self.cur.rowcount)


def recorded_sqlite(conn: sqlite3.Connection, component: str) -> int:
    """The version `component` has recorded in this SQLite file, read without a write or a
    transaction (0: none), so a store at its latest version opens without taking the lock."""
    cur = conn.cursor()
    cur.row_factory = sqlite3.Row
    table = cur.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ep_versions'")
    if not table.fetchone():
        return 0
    row = cur.execute(
        "SELECT max(version) AS version FROM ep_versions WHERE component = ?", (component,)
    ).fetchone()
    return int(row["version"] or 0)


def migrate_sqlite(
    conn: sqlite3.Connection, m: Migrations, applied_at: str, target: int | None = None
) -> int:
    """`migrate` in one BEGIN IMMEDIATE transaction on an autocommit connection."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = migrate(SqliteTx(conn), "sqlite", m, applied_at, target)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return version


def migrate_postgres(dsn: str, m: Migrations, applied_at: str, target: int | None = None) -> int:
    """`migrate` in one transaction on a connection of its own (blocking: call it from a
    thread in async code)."""
    # lazy: an embedded (SQLite-only) install never loads psycopg
    import psycopg

    with psycopg.connect(dsn) as conn, conn.transaction(), conn.cursor(row_factory=named_row) as cur:
        return migrate(PgTx(cur), "postgres", m, applied_at, target)


# What a server says while it cannot take connections for now (SQLSTATE 57P03
# cannot_connect_now, 53300 too_many_connections): waiting on a pool may outlast it.
_FOR_NOW = (
    "starting up", "shutting down", "recovery mode", "not yet accepting connections",
    "too many clients", "connection slots are reserved", "remaining connection slots",
)
# What an attempt that never reached a server says: it may be up later.
_NOT_REACHED = (
    "connection refused", "timeout expired", "could not connect", "no such file or directory",
    "is the server running", "could not translate host name", "network is unreachable",
    "no route to host", "server closed the connection unexpectedly",
)


def pg_refusal(dsn: str, timeout: int = 5) -> str | None:
    """The server's reason when it answered a connection and refused it in a way waiting
    will not change (FATAL: a database or role that does not exist, a password it does
    not take); None when it took the connection, could not be reached, or said it cannot
    take one for now. A store opens this way before it waits on its pool: a pool waits out
    its whole timeout for a database that does not exist, and ends with a timeout that no
    longer names the reason. (psycopg gives no SQLSTATE for a failed connection, hence the
    text; a server whose messages are translated finds no FATAL here and gets the wait.)
    Blocking: call it from a thread in async code."""
    import psycopg  # lazy: an embedded (SQLite-only) install never loads psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=timeout):
            return None
    except psycopg.Error as exc:
        text = str(exc)
        lower = text.lower()
        if "FATAL:" not in text or any(w in lower for w in _FOR_NOW + _NOT_REACHED):
            return None
        return " ".join(text.split("FATAL:", 1)[1].split())
