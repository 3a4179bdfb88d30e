"""A maintenance command never creates the store it was asked to maintain (issue 30):
`enforcer compact --db` at a file that does not exist made an empty store and reported
`removed 0`. Each compact command asks here first whether its store is there, without
opening it for writing."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from envelopay.errors import StoreError

# A table every version of each store has had since its first release.
ENFORCER_TABLE = "enf_sends"
LEDGER_TABLE = "ep_flows"


def missing_store(url: str, table: str, base: Path = Path(".")) -> str | None:
    """Why the store `url` names is not one to maintain (None when it is): no such file,
    or no `table` in it (not this kind of store). A PostgreSQL server that does not answer
    is a StoreError (the environment), as anywhere else."""
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_missing(url, table)
    path = Path(url.removeprefix("sqlite:///"))
    return _sqlite_missing(path if path.is_absolute() else base / path, table)


def _sqlite_missing(path: Path, table: str) -> str | None:
    if not path.is_file():
        return f"no such file: {path}"
    try:
        # mode=ro: reading the catalogue must not create or change the file.
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                               (table,)).fetchone()
    except sqlite3.DatabaseError as exc:
        return f"{path} is not a SQLite database ({exc})"
    return None if found else f"{path} holds no {table} table (not this kind of store)"


def _postgres_missing(dsn: str, table: str) -> str | None:
    import psycopg  # lazy: keeps the PostgreSQL driver off the CLI's start

    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"cannot reach the store: {exc}") from exc
    return None if row is not None and row[0] is not None else f"the database holds no {table} table"
