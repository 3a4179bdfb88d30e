"""One migrator for every store: the ledger, the enforcer's send and spend tables, the
mailbox index. Each store declares its `Migrations` (a component name and numbered
steps); `migrate` brings one component to a version inside the caller's write
transaction and records each step in `ep_versions`, the one table of applied versions
per database (stores sharing a database share it, keyed by component).

A step is statements per dialect, optionally followed by a Python function for what SQL
cannot say portably (SQLite has no ADD COLUMN IF NOT EXISTS). A long step (the mailbox
index rewritten, 100,000 messages) is a `chunk` instead: `migrate_in_runs` runs it again,
one committed transaction each, until it reports its work done, and records its version
in the transaction of the last run; the step keeps its own place in the database, so an
interruption loses at most the run under way and the next open goes on. A database made before a
component recorded its versions here is adopted: the component's `adopt` reads whatever
that older version kept (the ledger's `ep_migrations`), or, where every early step is
idempotent (CREATE ... IF NOT EXISTS), the steps simply run again over it.

Add steps at the end; never edit one a release has applied.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from envelopay.persist.rows import NamedRow

__all__ = [
    "LOCK_KEY", "VERSIONS_TABLE", "Dialect", "Migrations", "Step", "Tx",
    "current", "migrate", "migrate_in_runs",
]

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
    # A long step, run by `migrate_in_runs` once per transaction: (done, total) so far;
    # the step is over when done >= total.
    chunk: Callable[[Tx, Dialect], tuple[int, int]] | None = None


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


def _applied(x: Tx, dialect: Dialect, m: Migrations) -> int:
    now = current(x, dialect, m.component)
    if now == 0 and m.adopt is not None:
        for version, name, at in m.adopt(x, dialect):
            _record(x, m.component, version, name, at)
            now = max(now, version)
    return now


def _run(x: Tx, dialect: Dialect, m: Migrations, step: Step, applied_at: str) -> None:
    for stmt in step.sql.get(dialect, ()):
        x.exec(stmt)
    if step.python is not None:
        step.python(x, dialect)
    _record(x, m.component, step.version, step.name, applied_at)


def migrate(x: Tx, dialect: Dialect, m: Migrations, applied_at: str, target: int | None = None) -> int:
    """Bring `m.component` to `target` (default: its latest) in the caller's transaction;
    the version now. Steps already applied are skipped, so a second call does nothing."""
    goal = m.latest if target is None else target
    now = _applied(x, dialect, m)
    pending = [step for step in m.steps if now < step.version <= goal]
    long = [step.version for step in pending if step.chunk is not None]
    if long:  # refused before any step runs
        raise ValueError(f"{m.component} v{long[0]} is a long step: use migrate_in_runs")
    for step in pending:
        _run(x, dialect, m, step, applied_at)
        now = step.version
    return now


def migrate_in_runs(
    transaction: Callable[[], AbstractContextManager[Tx]],
    dialect: Dialect,
    m: Migrations,
    applied_at: str,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Bring `m.component` to its latest version, one committed `transaction()` per plain
    step and per run of a long one (`progress(done, total)` after each run); the version
    now. Each transaction reads the versions again, so processes migrating one database
    at once take turns and never apply a step twice."""
    while True:
        report: tuple[int, int] | None = None
        with transaction() as x:
            now = _applied(x, dialect, m)
            step = next((s for s in m.steps if s.version > now), None)
            if step is None:
                return now
            if step.chunk is None:
                _run(x, dialect, m, step, applied_at)
            else:
                report = step.chunk(x, dialect)
                if report[0] >= report[1]:
                    _record(x, m.component, step.version, step.name, applied_at)
        if report is not None and report[1] > 0 and progress is not None:  # (0, 0): no work
            progress(*report)


def _record(x: Tx, component: str, version: int, name: str, at: str) -> None:
    x.exec(
        "INSERT INTO ep_versions (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
        (component, version, name, at),
    )
