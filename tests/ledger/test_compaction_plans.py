"""Compaction costs what it removes: every statement `compact_ledger` sends is an index
search or an index range on both backends, with statistics and without (a ledger just
filled or restored has none; a join here once walked the log for every pair on
PostgreSQL, and compaction now takes statistics first there). Each statement is
EXPLAINed with its own parameters just before it runs, in its own transaction."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.ledger.test_plans import BACKLOG, NOW, _pg_bad

from envelopay.ledger._sql import Executor, Row, SqlStore
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.retention import compact_ledger
from envelopay.ledger.sqlite import SqliteStore
from envelopay.testing.fill import fill_ledger

FLOWS = 20_000
_TABLE_WALK = re.compile(r"^SCAN ep_\w+$")  # an ep_ table read without an index


class _Explain(Executor):
    """Runs each statement's EXPLAIN (the first time its text is seen) before it."""

    def __init__(self, inner: Executor, pg: bool, plans: dict[str, list[str]]) -> None:
        self.inner, self.pg, self.plans = inner, pg, plans

    def _plan(self, sql: str, params: Sequence[Any]) -> None:
        if "ep_retention" in sql or sql in self.plans:
            return
        if self.pg:
            row = self.inner.one("EXPLAIN (FORMAT JSON) " + sql, params)
            assert row is not None
            self.plans[sql] = _pg_bad(row[0][0]["Plan"])
        else:
            detail = [str(r[3]) for r in self.inner.all("EXPLAIN QUERY PLAN " + sql, params)]
            self.plans[sql] = [d for d in detail if _TABLE_WALK.match(d) or "TEMP B-TREE" in d]

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self._plan(sql, params)
        return self.inner.one(sql, params)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self._plan(sql, params)
        return self.inner.all(sql, params)

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        self._plan(sql, params)
        return self.inner.exec(sql, params)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        if rows:
            self._plan(sql, rows[0])
        return self.inner.many(sql, rows)


def _events(store: SqlStore, pg: bool) -> None:
    """A transport's records, one per flow (fill_ledger has none)."""
    if pg:
        sql = ("INSERT INTO ep_events (source, event_id, done_at, data)"
               " SELECT 'agentmail-event:x', 'evt' || i,"
               f" '2026-01-01'::timestamptz + i * interval '1 s', NULL FROM generate_series(1, {FLOWS}) i")
    else:
        sql = (f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {FLOWS})"
               " INSERT INTO ep_events (source, event_id, done_at, data)"
               " SELECT 'agentmail-event:x', 'evt' || i, '2026-01-01T00:00:00.000000+00:00', NULL FROM n")
    with store.write() as x:
        x.exec(sql)


def _check(store: SqlStore, pg: bool) -> None:
    plans: dict[str, list[str]] = {}
    write = store.write

    @contextmanager
    def explained() -> Iterator[Executor]:
        with write() as x:
            yield _Explain(x, pg, plans)

    store.write = explained  # type: ignore[method-assign]
    # A batch is a small share of the ledger, as on a real one (500 of a million): here
    # 100 of 20,000, so that an index search is the cheaper plan for each statement.
    report = compact_ledger(store, older_than=timedelta(days=30), now=NOW, batch=100)
    assert report.flows == FLOWS and report.removed["ep_log"] == 2 * FLOWS
    assert report.trimmed["ep_replay"] == FLOWS and report.removed["ep_events"] == FLOWS
    assert len(plans) >= 14  # flows, pairs, log, links, refs; two statements per walk
    assert {sql: bad for sql, bad in plans.items() if bad} == {}


@pytest.mark.parametrize("analyze", [True, False], ids=["analyzed", "no-statistics"])
def test_sqlite_compaction_uses_indexes(tmp_path: Path, analyze: bool) -> None:
    store = SqliteStore(tmp_path / "ledger.db")
    fill_ledger(store, FLOWS, pending=BACKLOG)
    _events(store, pg=False)
    if analyze:
        store._conn.execute("ANALYZE")
    _check(store, pg=False)
    store.close()


def test_postgres_compaction_uses_indexes(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=2)
    fill_ledger(store, FLOWS, pending=BACKLOG)
    _events(store, pg=True)
    _check(store, pg=True)  # no ANALYZE here: compaction takes its own statistics
    store.close()
