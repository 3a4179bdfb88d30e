"""What every part of `SqlStore` stands on: the executor a backend supplies, its value
codecs (SQLite keeps times and JSON as text, PostgreSQL as timestamptz and jsonb), and
the ledger's steps on the one migrator (envelopay.persist), which both backends run inside
their own write transaction."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from envelopay.ledger.jobs import JOBS_MIGRATIONS
from envelopay.ledger.schema import Dialect, steps
from envelopay.persist import Migrations, NamedRow, Step, Tx, current, migrate

__all__ = ["LEDGER_MIGRATIONS", "Executor", "Row", "SqlBase", "apply_migrations", "ledger_version"]

Row = NamedRow  # sqlite3.Row on SQLite, persist.Record on PostgreSQL: read by column name


class Executor(ABC):
    @abstractmethod
    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    @abstractmethod
    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    @abstractmethod
    def exec(self, sql: str, params: Sequence[Any] = ()) -> int: ...

    @abstractmethod
    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run `sql` once per row (PostgreSQL: pipelined, one round trip); rows changed."""


class SqlBase(ABC):
    """The backend hooks: transactions and value codecs."""

    dialect: Dialect  # set by the backend (SqliteStore, PostgresStore)

    @abstractmethod
    def write(self) -> AbstractContextManager[Executor]: ...

    @abstractmethod
    def read(self) -> AbstractContextManager[Executor]: ...

    @abstractmethod
    def t(self, dt: datetime | None) -> Any: ...

    @abstractmethod
    def ut(self, value: Any) -> datetime: ...

    @abstractmethod
    def j(self, obj: Any) -> Any: ...

    @abstractmethod
    def uj(self, value: Any) -> Any: ...

    def ut_opt(self, value: Any) -> datetime | None:
        return None if value is None else self.ut(value)

    def uj_opt(self, value: Any) -> Any:
        return None if value is None else self.uj(value)


_OLD_TABLE = {  # where releases before the one migrator recorded the ledger's versions
    "sqlite": "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = 'ep_migrations'",
    "postgres": "SELECT 1 AS found WHERE to_regclass('ep_migrations') IS NOT NULL",
}


def _adopt(x: Tx, dialect: Dialect) -> list[tuple[int, str, str]]:
    """The versions an older release recorded in `ep_migrations` (kept, not dropped: a
    process of that release still running reads it, finds itself current, and changes
    nothing)."""
    if not x.all(_OLD_TABLE[dialect]):
        return []
    rows: Sequence[NamedRow] = x.all("SELECT version, name, applied_at FROM ep_migrations ORDER BY version")
    return [(int(r["version"]), str(r["name"]), str(r["applied_at"])) for r in rows]


def _ledger() -> Migrations:
    lite = {v: (name, stmts) for v, name, stmts in steps("sqlite")}
    pg = {v: stmts for v, _, stmts in steps("postgres")}
    return Migrations(
        "ledger",
        tuple(
            Step(v, name, {"sqlite": stmts, "postgres": pg[v]}) for v, (name, stmts) in sorted(lite.items())
        ),
        adopt=_adopt,
    )


LEDGER_MIGRATIONS = _ledger()


def ledger_version(x: Executor, dialect: Dialect) -> int:
    """The ledger's schema version (one an older release recorded counts until adopted)."""
    now = current(x, dialect, "ledger")
    if now == 0:
        now = max((v for v, _, _ in _adopt(x, dialect)), default=0)
    return now


def apply_migrations(x: Executor, dialect: Dialect, target: int, applied_at: str) -> int:
    """Bring the schema to `target` inside the caller's transaction; the version now
    (the ledger's; its jobs table, a component of its own, goes to its latest)."""
    now = migrate(x, dialect, LEDGER_MIGRATIONS, applied_at, target)
    migrate(x, dialect, JOBS_MIGRATIONS, applied_at)
    return now
