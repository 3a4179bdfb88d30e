"""The one migrator (envelopay.persist): versioned steps per store, one table of applied
versions per database, on both backends; a ledger made before it (its versions in
`ep_migrations`) is adopted in place; rows read by column name on both backends."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.schema import LATEST, steps
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Claim, Commit
from envelopay.persist import Migrations, Step, Tx, current, migrate, migrate_in_runs
from envelopay.persist.adapters import PgTx, SqliteTx, migrate_postgres, migrate_sqlite
from envelopay.persist.rows import Record, named_row

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _added(x: Tx, dialect: str) -> None:
    x.exec("INSERT INTO kv (k, v) VALUES ('python', 'ran')")


DEMO = Migrations(
    "demo",
    (
        Step(1, "kv", {"sqlite": ["CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)"],
                       "postgres": ["CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)"]}),
        Step(2, "a python step", python=_added),
        Step(3, "an index", {d: ["CREATE INDEX kv_v ON kv (v)"] for d in ("sqlite", "postgres")}),  # type: ignore[misc]
    ),
)
OTHER = Migrations("other", (Step(1, "t", {"sqlite": ["CREATE TABLE t (a INT)"],
                                            "postgres": ["CREATE TABLE t (a INT)"]}),))


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    if request.param == "sqlite":
        yield "sqlite", str(tmp_path / "m.db")
    else:
        yield "postgres", str(request.getfixturevalue("pg_dsn"))


def _run(backend: tuple[str, str], m: Migrations, target: int | None = None) -> int:
    kind, where = backend
    if kind == "sqlite":
        conn = sqlite3.connect(where, isolation_level=None)
        try:
            return migrate_sqlite(conn, m, "at", target)
        finally:
            conn.close()
    return migrate_postgres(where, m, "at", target)


def _rows(backend: tuple[str, str], sql: str) -> list[tuple[object, ...]]:
    kind, where = backend
    if kind == "sqlite":
        with sqlite3.connect(where) as conn:
            return [tuple(r) for r in conn.execute(sql)]
    with psycopg.connect(where) as pg:
        return [tuple(r) for r in pg.execute(sql)]


def test_steps_run_once_in_order_per_component(backend: tuple[str, str]) -> None:
    assert _run(backend, DEMO, target=1) == 1
    assert _rows(backend, "SELECT k FROM kv") == []
    assert _run(backend, DEMO) == 3
    assert _run(backend, DEMO) == 3  # nothing left: the python step did not run again
    assert _rows(backend, "SELECT k, v FROM kv") == [("python", "ran")]
    assert _run(backend, OTHER) == 1  # another store, the same table of versions
    got = _rows(backend, "SELECT component, version, name FROM ep_versions ORDER BY component, version")
    assert got == [
        ("demo", 1, "kv"), ("demo", 2, "a python step"), ("demo", 3, "an index"), ("other", 1, "t")
    ]


def test_a_failing_step_leaves_nothing(backend: tuple[str, str]) -> None:
    bad = Migrations("demo", (*DEMO.steps, Step(4, "broken", {"sqlite": ["CREATE TABLE kv (x INT)"],
                                                               "postgres": ["CREATE TABLE kv (x INT)"]})))
    assert _run(backend, DEMO, target=1) == 1
    with pytest.raises((sqlite3.Error, psycopg.Error)):
        _run(backend, bad)
    # Steps 2 and 3 ran in the same transaction as the failing 4: none of them stayed.
    assert _rows(backend, "SELECT version FROM ep_versions WHERE component = 'demo'") == [(1,)]
    assert _rows(backend, "SELECT k FROM kv") == []


def test_steps_must_ascend() -> None:
    with pytest.raises(ValueError, match="ascend"):
        Migrations("x", (Step(2, "b"), Step(1, "a")))
    with pytest.raises(ValueError, match="ascend"):
        Migrations("x", ())


def test_current_reads_zero_before_any_step(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    assert current(SqliteTx(conn), "sqlite", "nothing") == 0
    conn.close()


def _old_ledger(backend: tuple[str, str], upto: int) -> None:
    """A ledger as releases before the one migrator made it: the same steps, recorded in
    ep_migrations (version, name, applied_at)."""
    kind, where = backend
    table = (
        "CREATE TABLE ep_migrations"
        " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    stmts = [table]
    records = []
    for version, name, sql in steps(kind):  # type: ignore[arg-type]
        if version <= upto:
            stmts += sql
            records.append((version, name, f"2025-01-{version:02d}"))
    if kind == "sqlite":
        conn = sqlite3.connect(where, isolation_level=None)
        for s in stmts:
            conn.execute(s)
        conn.executemany("INSERT INTO ep_migrations VALUES (?, ?, ?)", records)
        conn.close()
    else:
        with psycopg.connect(where, autocommit=True) as pg:
            for s in stmts:
                pg.execute(s)
            with pg.cursor() as cur:
                cur.executemany("INSERT INTO ep_migrations VALUES (%s, %s, %s)", records)


def test_a_ledger_made_before_the_migrator_is_adopted(backend: tuple[str, str]) -> None:
    kind, where = backend
    _old_ledger(backend, 10)
    store = SqliteStore(where) if kind == "sqlite" else PostgresStore(where)
    try:
        assert store.version() == LATEST
        got = _rows(backend, "SELECT version, applied_at FROM ep_versions WHERE component = 'ledger'"
                             " ORDER BY version")
        assert [v for v, _ in got] == list(range(1, LATEST + 1))
        assert got[0] == (1, "2025-01-01"), "the adopted versions keep when they were applied"
        claim = Claim("a@x.test", "<m1>", "h", "w", T0, T0)
        assert store.begin_step(claim).status == "new"
        assert store.commit_step(Commit("a@x.test", T0, {"status": "processed"}, message_id="<m1>",
                                        worker="w")) == "ok"
        assert store.inbound_outcome("a@x.test", "<m1>") == {"status": "processed"}
        assert store.migrate() == LATEST
        # ep_migrations stays as that release left it: a process of it still running
        # reads itself current and changes nothing.
        assert _rows(backend, "SELECT max(version) FROM ep_migrations") == [(10,)]
    finally:
        store.close()


def test_a_ledger_adopted_mid_history_upgrades(backend: tuple[str, str]) -> None:
    kind, where = backend
    _old_ledger(backend, 4)
    old = SqliteStore(where, migrate=False) if kind == "sqlite" else PostgresStore(where, migrate=False)
    assert old.version() == 4, "read from ep_migrations before adoption"
    old.close()
    new = SqliteStore(where) if kind == "sqlite" else PostgresStore(where)
    try:
        assert new.version() == LATEST
        sql = "SELECT version FROM ep_versions WHERE component = 'ledger'"
        versions = [v for (v,) in _rows(backend, sql)]
        assert sorted(versions) == list(range(1, LATEST + 1))
    finally:
        new.close()


def test_rows_by_name_on_both_backends(tmp_path: Path, pg_dsn: str) -> None:
    conn = sqlite3.connect(tmp_path / "r.db")
    (lite,) = SqliteTx(conn).all("SELECT 1 AS one, 'x' AS two")
    assert (lite["one"], lite["two"]) == (1, "x")
    conn.close()
    with psycopg.connect(pg_dsn) as pg:
        with pg.cursor(row_factory=dict_row) as cur:
            (d,) = PgTx(cur).all("SELECT 1 AS one, 'x' AS two")
        with pg.cursor(row_factory=named_row) as cur2:
            cur2.execute("SELECT 1 AS one, 'x' AS two")
            rec = cur2.fetchone()
    assert (d["one"], d["two"]) == (1, "x")
    assert isinstance(rec, Record) and (rec["one"], rec["two"], rec[1]) == (1, "x", "x")
    assert rec == (1, "x") and list(rec) == [1, "x"] and rec.keys() == ["one", "two"] and len(rec) == 2


def test_migrate_in_a_callers_transaction(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    assert migrate(SqliteTx(conn), "sqlite", DEMO, "at", 1) == 1
    conn.execute("ROLLBACK")  # the caller's rollback takes the step and its record
    assert current(SqliteTx(conn), "sqlite", "demo") == 0
    conn.close()


def _long(x: Tx, dialect: str) -> tuple[int, int]:
    """A long step over the rows of `todo`: two a run, its place kept in the database."""
    rows = x.all("SELECT n FROM todo WHERE done = 0 ORDER BY n LIMIT 2")
    for r in rows:
        x.exec("UPDATE todo SET done = 1 WHERE n = ?", (r["n"],))
    (left,) = x.all("SELECT count(*) AS n FROM todo WHERE done = 0")
    return 5 - int(left["n"]), 5


LONG = Migrations(
    "long",
    (
        Step(1, "todo", {"sqlite": ["CREATE TABLE todo (n INT, done INT)",
                                    "INSERT INTO todo VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0)"]}),
        Step(2, "walk", chunk=_long),
    ),
)


def test_a_long_step_runs_in_committed_runs_and_resumes(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "l.db", isolation_level=None)

    @contextmanager
    def transaction() -> Iterator[Tx]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield SqliteTx(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    seen: list[tuple[int, int]] = []

    def stop(done: int, total: int) -> None:
        seen.append((done, total))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        migrate_in_runs(transaction, "sqlite", LONG, "at", stop)
    assert seen == [(2, 5)] and current(SqliteTx(conn), "sqlite", "long") == 1, "step 2 not recorded yet"
    steps: list[tuple[int, int]] = []
    assert migrate_in_runs(transaction, "sqlite", LONG, "at", lambda d, t: steps.append((d, t))) == 2
    assert steps == [(4, 5), (5, 5)], "resumed where the committed run stopped"
    assert migrate_in_runs(transaction, "sqlite", LONG, "at", lambda d, t: steps.append((d, t))) == 2
    assert steps == [(4, 5), (5, 5)]
    with pytest.raises(ValueError, match="long step"):
        migrate(SqliteTx(conn), "sqlite", Migrations("long2", LONG.steps), "at")
    conn.close()


def test_processes_opening_one_database_at_once_apply_each_step_once(pg_dsn: str) -> None:
    # Each call is its own connection and transaction, as separate processes' opens are.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(lambda _: migrate_postgres(pg_dsn, DEMO, "at"), range(6)))
    assert got == [3] * 6
    backend = ("postgres", pg_dsn)
    assert _rows(backend, "SELECT count(*) FROM ep_versions WHERE component = 'demo'") == [(3,)]
    assert _rows(backend, "SELECT count(*) FROM kv") == [(1,)], "the python step ran once"
