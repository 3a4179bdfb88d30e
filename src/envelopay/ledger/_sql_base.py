"""What every part of `SqlStore` stands on: the executor a backend supplies, its value
codecs (SQLite keeps times and JSON as text, PostgreSQL as timestamptz and jsonb), and
the migration loop both backends run inside their own write transaction."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any

from envelopay.ledger.schema import MIGRATIONS_TABLE, Dialect, steps

__all__ = ["Executor", "Row", "SqlBase", "apply_migrations"]

Row = Sequence[Any]


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


def apply_migrations(x: Executor, dialect: Dialect, target: int, applied_at: str) -> int:
    """Bring the schema to `target` inside the caller's transaction; the version now."""
    x.exec(MIGRATIONS_TABLE)
    row = x.one("SELECT MAX(version) FROM ep_migrations")
    current = int(row[0] or 0) if row else 0
    for version, name, stmts in steps(dialect):
        if current < version <= target:
            for stmt in stmts:
                x.exec(stmt)
            x.exec(
                "INSERT INTO ep_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (version, name, applied_at),
            )
            current = version
    return current
