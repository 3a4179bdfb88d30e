"""Every hot ledger query is an index search on both backends, at a size where a wrong
plan shows, and the drain keeps its plan when statistics are taken during a backlog.

The statements are not copied here: each store operation of the hot path runs once
against a filled ledger (envelopay.testing.fill) through a recording executor, and
every statement it sent is EXPLAINed with the parameters it was sent with. On
PostgreSQL the step runs through the portable path, whose statements are the ones the
server-side step functions run (same tables, same keys).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from envelopay.ledger._sql import Executor, Row, SqlStore
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import CallRecord, Claim, Commit, FlowRecord, FlowWrite, LogEntry, ProofKey
from envelopay.protocol.messages import Fulfill
from envelopay.protocol.outbound import Outbound
from envelopay.testing.fill import LOCAL, fill_ledger

FLOWS = 20_000
BACKLOG = 0.05  # the measurement flipped the plan at 3% pending
NOW = datetime(2030, 1, 1, tzinfo=UTC)
PEER = "buyer5@fill.test"


class _Recorder(Executor):
    def __init__(self, inner: Executor, seen: list[tuple[str, Sequence[Any]]]) -> None:
        self.inner, self.seen = inner, seen

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self.seen.append((sql, params))
        return self.inner.one(sql, params)

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.seen.append((sql, params))
        return self.inner.all(sql, params)

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.seen.append((sql, params))
        return self.inner.exec(sql, params)

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        if rows:
            self.seen.append((sql, rows[0]))
        return self.inner.many(sql, rows)


def _record(store: SqlStore) -> list[tuple[str, Sequence[Any]]]:
    seen: list[tuple[str, Sequence[Any]]] = []
    read, write = store.read, store.write

    @contextmanager
    def rec_read() -> Iterator[Executor]:
        with read() as x:
            yield _Recorder(x, seen)

    @contextmanager
    def rec_write() -> Iterator[Executor]:
        with write() as x:
            yield _Recorder(x, seen)

    store.read = rec_read  # type: ignore[method-assign]
    store.write = rec_write  # type: ignore[method-assign]
    return seen


def _hot_path(store: SqlStore) -> None:
    """One inbound step joining flow f5 by its ref and thread, its reply drained, the reads
    the CLI and the engine make, and the call table's operations."""
    mid = "<new5@fill.test>"
    claim = Claim(
        LOCAL, mid, "b" * 64, "w2", NOW, NOW + timedelta(minutes=5), sender=PEER, protocol_id="p-new5",
        proof=ProofKey("solana", "k-new5"), refs=("o5",), thread=("<out5@fill.test>",),
    )
    begun = store.begin_step(claim)
    assert begun.status == "new" and [f.flow_id for f in begun.ref_flows] == ["f5"]
    flow = begun.ref_flows[0]
    reply = Outbound(
        LOCAL, PEER, Fulfill(id="ful-new5", order_ref="p-new5", result={"ok": True}), "<rep5@fill.test>", NOW,
        in_reply_to=mid, references=(mid,),
    )
    rec = FlowRecord(**{**{k: getattr(flow, k) for k in FlowRecord.__slots__}, "state": "fulfilled"})
    log = LogEntry("f5", NOW, "in", "order", mid, "p-new5", PEER, LOCAL, {"type": "order"})
    commit = Commit(
        LOCAL, NOW, {"status": "processed", "flow_id": "f5"}, message_id=mid, worker="w2",
        flow=FlowWrite(rec), log=(log,), refs=((PEER, LOCAL, "ful-new5", "f5"),),
        message_ids=((mid, "f5"),), outbox=((reply, "f5"),), proof=ProofKey("solana", "k-new5"),
        proof_fate="spend", proof_verdict={"status": "valid"}, sender=PEER, protocol_id="p-new5",
        replay_fate="done",
    )
    assert store.commit_step(commit) == "ok"
    due = store.outbox_pending(NOW, 50)
    assert len(due) == 50
    assert store.mark_sent(due[0].outbound.message_id, NOW)
    assert store.mark_failed(due[1].outbound.message_id, NOW, "451", retry_at=NOW + timedelta(seconds=30))
    assert store.outbox_get("<rep5@fill.test>") is not None
    assert store.get_flow("f5") is not None
    page = store.list_flows(None, 20)
    assert len(page) == 20
    assert len(store.list_flows(None, 20, before=(page[-1].updated_at, page[-1].flow_id))) == 20
    assert len(store.list_flows(LOCAL, 20)) == 20
    assert len(store.flow_log("f5")) == 3
    assert store.flow_for_message(LOCAL, "<in7@fill.test>") is not None
    assert store.flow_for_ref(LOCAL, "buyer7@fill.test", LOCAL, "o7") is not None
    assert store.inbound_outcome(LOCAL, "<in7@fill.test>") is not None
    assert store.proof_status(ProofKey("solana", "k7")) == "spent"
    store.call_add(CallRecord("c-new", LOCAL, PEER, "<call-new@fill.test>", NOW + timedelta(hours=1),
                              created_at=NOW))
    assert store.call_for_reply(LOCAL, "<call-new@fill.test>") is not None
    assert [c.call_id for c in store.calls_pending(LOCAL)] == ["c-new"]
    assert store.calls_pending() != []
    assert store.calls_expire(NOW) == []
    assert store.call_resolve("c-new", "answered", {"ok": True}, NOW)


_SQLITE_FULL_SCAN = re.compile(r"^SCAN \w+( AS \w+)?$")  # a table walk, no index


def _sqlite_plan(store: SqliteStore, sql: str, params: Sequence[Any]) -> list[str]:
    return [r[3] for r in store._conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]


def _sqlite_bad(detail: list[str]) -> list[str]:
    return [d for d in detail if _SQLITE_FULL_SCAN.match(d) or "TEMP B-TREE" in d]


def _pg_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for sub in plan.get("Plans", ()):
        yield from _pg_nodes(sub)


def _pg_plan(
    conn: psycopg.Connection[Any], sql: str, params: Sequence[Any], opts: str = ""
) -> dict[str, Any]:
    row = conn.execute(f"EXPLAIN (FORMAT JSON{opts}) " + sql.replace("?", "%s"), params).fetchone()
    assert row is not None
    plan: dict[str, Any] = row[0][0]["Plan"]
    return plan


def _pg_bad(plan: dict[str, Any]) -> list[str]:
    return [
        f"{n['Node Type']} {n.get('Relation Name', '')}"
        for n in _pg_nodes(plan)
        if (n["Node Type"] == "Seq Scan" and str(n.get("Relation Name", "")).startswith("ep_"))
        or n["Node Type"] in ("Sort", "Incremental Sort")
    ]


_DRAIN = "FROM ep_outbox WHERE status = 'pending'"


def test_sqlite_hot_queries_use_indexes(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ledger.db")
    fill_ledger(store, FLOWS, pending=BACKLOG)
    store._conn.execute("ANALYZE")  # statistics taken during the backlog
    seen = _record(store)
    _hot_path(store)
    assert len(seen) > 25
    bad = {sql: _sqlite_bad(_sqlite_plan(store, sql, p)) for sql, p in seen}
    assert {sql: b for sql, b in bad.items() if b} == {}
    drains = [(sql, p) for sql, p in seen if _DRAIN in sql]
    assert drains and all("ep_outbox_due" in " ".join(_sqlite_plan(store, s, p)) for s, p in drains)
    flows = [(sql, p) for sql, p in seen if "FROM ep_flows f" in sql and "ORDER BY" in sql]
    assert len(flows) == 3
    for sql, p in flows:
        plan = " ".join(_sqlite_plan(store, sql, p))
        assert re.search(r"USING (COVERING )?INDEX ep_flows_(local_)?recent", plan)
    store.close()


def test_sqlite_plan_check_catches_a_table_walk(tmp_path: Path) -> None:
    # The detector itself: the drain without any pending index walks the table.
    store = SqliteStore(tmp_path / "ledger.db")
    fill_ledger(store, 2_000, pending=BACKLOG)
    store._conn.execute("DROP INDEX ep_outbox_due")
    sql = f"SELECT seq {_DRAIN} AND (next_attempt IS NULL OR next_attempt <= ?) ORDER BY seq LIMIT ?"
    assert _sqlite_bad(_sqlite_plan(store, sql, (NOW.isoformat(), 10))) != []
    store.close()


@pytest.mark.parametrize("generic", [False, True], ids=["custom", "generic"])
def test_postgres_hot_queries_use_indexes(pg_dsn: str, generic: bool) -> None:
    store = PostgresStore(pg_dsn, max_size=2)
    fill_ledger(store, FLOWS, pending=BACKLOG)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")  # statistics taken while 5% of the outbox is pending
    store._server_steps = False  # run the step's statements one by one, to EXPLAIN each
    seen = _record(store)
    _hot_path(store)
    assert len(seen) > 25
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if generic:  # what a prepared statement runs after psycopg's prepare threshold
            conn.execute("SET plan_cache_mode = force_generic_plan")
        bad = {sql: _pg_bad(_pg_plan(conn, sql, p)) for sql, p in seen}
        assert {sql: b for sql, b in bad.items() if b} == {}
        drains = [(sql, p) for sql, p in seen if _DRAIN in sql]
        assert drains
        for sql, p in drains:
            plan = _pg_plan(conn, sql, p, ", ANALYZE, BUFFERS")
            assert {n.get("Index Name") for n in _pg_nodes(plan)} >= {"ep_outbox_due"}
            # The walk stops at the page it needs: a handful of buffers, not the table.
            assert plan["Shared Hit Blocks"] + plan["Shared Read Blocks"] < 100
    store.close()


def test_postgres_drain_plan_survives_a_drained_backlog(pg_dsn: str) -> None:
    # Statistics taken during a 40% backlog, then the backlog drains: the plan must not
    # be the primary-key walk the issue measured (it stayed after the backlog drained).
    store = PostgresStore(pg_dsn, max_size=2)
    fill_ledger(store, FLOWS, pending=0.40)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("ANALYZE ep_outbox")
        conn.execute("UPDATE ep_outbox SET status = 'sent', sent_at = now() WHERE status = 'pending'")
        conn.execute("VACUUM ep_outbox")  # what autovacuum does; the backlog's statistics stay
        sql = (
            f"SELECT message_id {_DRAIN} AND (next_attempt IS NULL OR next_attempt <= %s)"
            " ORDER BY seq LIMIT %s"
        )
        plan = _pg_plan(conn, sql, (NOW, 100), ", ANALYZE, BUFFERS")
        assert {n.get("Index Name") for n in _pg_nodes(plan)} >= {"ep_outbox_due"}
        assert plan["Actual Rows"] == 0
        used = plan["Shared Hit Blocks"] + plan["Shared Read Blocks"]
        # The detector: without the partial index the same statistics give a walk. (The
        # two are compared, not held to a fixed count: a transaction elsewhere on the
        # server can keep VACUUM from removing the drained rows' dead index entries.)
        conn.execute("DROP INDEX ep_outbox_due")
        walked = _pg_plan(conn, sql, (NOW, 100), ", ANALYZE, BUFFERS")
        assert "ep_outbox_due" not in {n.get("Index Name") for n in _pg_nodes(walked)}
        assert walked["Shared Hit Blocks"] + walked["Shared Read Blocks"] > 2 * used
    store.close()
