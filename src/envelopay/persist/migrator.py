"""One migrator for every store: the ledger, the enforcer's send and spend tables, the
mailbox index. Each store declares its `Migrations` (a component name and numbered
steps); `migrate` brings one component to a version inside the caller's write
transaction and records each step in `ep_versions`, the one table of applied versions
per database (stores sharing a database share it, keyed by component).

A step is statements per dialect, optionally followed by a Python function for what SQL
cannot say portably (SQLite has no ADD COLUMN IF NOT EXISTS). A database made before a
component recorded its versions here is adopted: the component's `adopt` reads whatever
that older version kept (the ledger's `ep_migrations`), or, where every early step is
idempotent (CREATE ... IF NOT EXISTS), the steps simply run again over it.

Add steps at the end; never edit one a release has applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from envelopay.persist.rows import NamedRow

__all__ = ["LOCK_KEY", "VERSIONS_TABLE", "Dialect", "Migrations", "Step", "Tx", "current", "migrate"]

Dialect = Literal["sqlite", "postgres"]

VERSIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ep_versions (component TEXT NOT NULL, version INTEGER NOT NULL,"
    " name TEXT NOT NULL, applied_at TEXT NOT NULL, PRIMARY KEY (component, version))"
)
# PostgreSQL: one advisory lock, held to the end of the migrating transaction, so processes
# opening one database at once apply each step exactly once ("epmg"). SQLite's BEGIN
# IMMEDIATE already admits one writer.
LOCK_KEY = 0x65_70_6D_67


class Tx(Protocol):
    """The caller's open write transaction ('?' placeholders on both dialects)."""

    def all(self, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int: ...


@dataclass(frozen=True, slots=True)
class Step:
    version: int
    name: str
    sql: Mapping[Dialect, Sequence[str]] = field(default_factory=dict)
    # Runs after the step's statements, in the same transaction.
    python: Callable[[Tx, Dialect], None] | None = None


# What a database made before ep_versions already holds: (version, name, applied_at) rows.
Adopt = Callable[[Tx, Dialect], Sequence[tuple[int, str, str]]]


@dataclass(frozen=True, slots=True)
class Migrations:
    component: str
    steps: tuple[Step, ...]
    adopt: Adopt | None = None

    def __post_init__(self) -> None:
        versions = [s.version for s in self.steps]
        if versions != sorted(set(versions)) or not versions or versions[0] < 1:
            raise ValueError(f"{self.component}: step versions must ascend from 1 without repeats")

    @property
    def latest(self) -> int:
        return self.steps[-1].version


def current(x: Tx, dialect: Dialect, component: str) -> int:
    """The newest version of `component` applied to this database (0: none)."""
    if dialect == "postgres":  # the table may be created here: one creator at a time
        x.exec("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
    x.exec(VERSIONS_TABLE)
    rows: Sequence[NamedRow] = x.all(
        "SELECT MAX(version) AS version FROM ep_versions WHERE component = ?", (component,)
    )
    return int(rows[0]["version"] or 0) if rows else 0


def migrate(x: Tx, dialect: Dialect, m: Migrations, applied_at: str, target: int | None = None) -> int:
    """Bring `m.component` to `target` (default: its latest) in the caller's transaction;
    the version now. Steps already applied are skipped, so a second call does nothing."""
    goal = m.latest if target is None else target
    now = current(x, dialect, m.component)
    if now == 0 and m.adopt is not None:
        for version, name, at in m.adopt(x, dialect):
            _record(x, m.component, version, name, at)
            now = max(now, version)
    for step in m.steps:
        if now < step.version <= goal:
            for stmt in step.sql.get(dialect, ()):
                x.exec(stmt)
            if step.python is not None:
                step.python(x, dialect)
            _record(x, m.component, step.version, step.name, applied_at)
            now = step.version
    return now


def _record(x: Tx, component: str, version: int, name: str, at: str) -> None:
    x.exec(
        "INSERT INTO ep_versions (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
        (component, version, name, at),
    )
