"""Ledger retention on both backends: what ages out goes, replays stay refused, a second
run starts from its cursor, and compaction runs beside a live writer."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.ledger._sql import SqlStore
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.retention import compact_ledger
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Claim, Commit, FlowRecord, FlowWrite, LogEntry, ProofKey
from envelopay.protocol.messages import Fulfill
from envelopay.protocol.outbound import Outbound
from envelopay.testing.fill import LOCAL, fill_ledger

T = datetime(2026, 6, 1, tzinfo=UTC)
LATER = datetime(2027, 6, 1, tzinfo=UTC)
PEER = "buyer@real.test"


@pytest.fixture(params=["sqlite", "postgres"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SqlStore]]:
    made: list[SqlStore] = []

    def factory() -> SqlStore:
        s: SqlStore
        if request.param == "sqlite":
            s = SqliteStore(tmp_path / "ledger.db")
        else:
            s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.close()  # type: ignore[attr-defined]


def _claim(mid: str, content: str = "h1", pid: str = "ord-1", key: str = "sig-1") -> Claim:
    return Claim(
        LOCAL, mid, content, "w1", T, T + timedelta(minutes=5), sender=PEER, protocol_id=pid,
        proof=ProofKey("solana", key),
    )


def _step(store: SqlStore, mid: str, n: int, at: datetime = T) -> None:
    """A paid ORDER that opens flow `real-n` and queues its FULFILL, as the engine commits it."""
    claim = _claim(mid, pid=f"ord-{n}", key=f"sig-{n}")
    claim = Claim(**{**{k: getattr(claim, k) for k in Claim.__slots__}, "now": at})
    assert store.begin_step(claim).status == "new"
    flow = FlowRecord(f"real-{n}", LOCAL, PEER, "order", "seller", "fulfilled", 0, {"n": n}, at, at)
    reply = Outbound(LOCAL, PEER, Fulfill(id=f"ful-{n}", order_ref=f"ord-{n}", result="ok"), f"<r{n}@x>", at)
    commit = Commit(
        LOCAL, at, {"status": "processed", "flow_id": f"real-{n}", "outbox": [f"<r{n}@x>"]}, message_id=mid,
        worker="w1", flow=FlowWrite(flow),
        log=(LogEntry(f"real-{n}", at, "in", "order", mid, f"ord-{n}", PEER, LOCAL, {"type": "order"}),),
        refs=((PEER, LOCAL, f"ful-{n}", f"real-{n}"),), message_ids=((mid, f"real-{n}"),),
        outbox=((reply, f"real-{n}"),), proof=ProofKey("solana", f"sig-{n}"), proof_fate="spend",
        proof_verdict={"status": "valid"}, sender=PEER, protocol_id=f"ord-{n}", replay_fate="done",
    )
    assert store.commit_step(commit) == "ok"
    assert store.mark_sent(f"<r{n}@x>", at)


def _count(store: SqlStore, table: str, where: str = "") -> int:
    with store.read() as x:
        row = x.one(f"SELECT count(*) FROM {table} {where}")
    assert row is not None
    return int(row[0])


def test_compaction_keeps_what_refuses_replays(make: Callable[[], SqlStore]) -> None:
    store = make()
    fill_ledger(store, 300, pending=0.1)
    _step(store, "<m1@real.test>", 1)
    report = compact_ledger(store, older_than=timedelta(days=30), now=LATER, batch=50, vacuum=True)
    assert report.flows == 301
    assert report.removed["ep_log"] == 601 and report.removed["ep_outbox"] == 271
    assert report.trimmed == {"ep_inbound": 301, "ep_replay": 301}
    assert _count(store, "ep_log") == 0 and _count(store, "ep_flow_msgids") == 0
    assert _count(store, "ep_flow_refs") == 0
    assert _count(store, "ep_outbox") == 30  # the pending backlog stays until it is sent
    assert _count(store, "ep_outbox", "WHERE status = 'pending'") == 30
    assert _count(store, "ep_replay") == 301 and _count(store, "ep_proofs") == 301
    # The smallest forms: the log count in the flow row, a pair's hash in 32 bytes and
    # no outcome, a claim without its hash, lease or done time.
    assert _count(store, "ep_flows", "WHERE compacted = 2") == 300
    assert _count(store, "ep_flows", "WHERE compacted = 1") == 1
    with store.read() as x:
        pair = x.one("SELECT content_hash, digest, outcome FROM ep_replay WHERE protocol_id = 'p7'")
        claim = x.one("SELECT content_hash, lease_until, worker, done_at FROM ep_inbound"
                      " WHERE message_id = '<in7@fill.test>'")
    assert pair is not None and (pair[0], bytes(pair[1]), pair[2]) == ("", bytes.fromhex("a" * 32), None)
    assert claim is not None and tuple(claim) == ("", None, None, None)
    assert store.get_flow("real-1") is not None and store.flow_log("real-1") == []
    assert store.inbound_outcome(LOCAL, "<m1@real.test>") == {"status": "processed", "flow_id": "real-1"}

    # Every replay is still refused, whoever presents it.
    assert store.begin_step(_claim("<m1@real.test>", pid="ord-1", key="sig-1")).status == "seen"
    assert store.begin_step(_claim("<m2@real.test>", content="other", pid="ord-1")).status == "duplicate_id"
    again = store.begin_step(_claim("<m3@real.test>", pid="ord-1", key="sig-1"))
    assert again.status == "retransmission" and again.requeued == ()  # the old reply aged out
    assert again.outcome == {"status": "processed", "flow_id": "real-1"}
    assert store.begin_step(_claim("<m4@real.test>", pid="ord-new", key="sig-1")).status == "proof_replayed"
    assert store.proof_status(ProofKey("solana", "k7")) == "spent"

    # A second run walks on from its cursors: only the retransmission's own claim (done
    # just now, at T) is new to it.
    second = compact_ledger(store, older_than=timedelta(days=30), now=LATER, batch=50)
    assert (second.flows, second.trimmed) == (0, {"ep_inbound": 1})
    assert sum(second.removed.values()) == 0


def test_compaction_runs_beside_a_live_writer(make: Callable[[], SqlStore]) -> None:
    store, worker = make(), make()  # two connections (pools), as two processes have
    fill_ledger(store, 2_000)
    errors: list[BaseException] = []

    def live() -> None:
        try:
            for n in range(100, 160):
                _step(worker, f"<live{n}@real.test>", n, at=LATER)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    t = threading.Thread(target=live)
    t.start()
    report = compact_ledger(store, older_than=timedelta(days=30), now=LATER, batch=100)
    t.join()
    assert errors == []
    assert report.flows == 2_000  # the live flows are new: not compacted
    assert [f.flow_id for f in worker.list_flows(LOCAL, 1)] == ["real-159"]
    assert len(worker.flow_log("real-120")) == 1


def test_transport_events_age_out_on_the_operators_window(make: Callable[[], SqlStore]) -> None:
    # The AgentMail transport's records (webhook event ids, handled message ids, the
    # Message-ID -> AgentMail id map) go once older than the window, but never younger
    # than the poller's 7-day lookback.
    store = make()
    inbox = "agentmail-event:seller@agentmail.to"
    for age in (2, 8, 40):
        assert store.event_done(inbox, f"evt_{age}d", LATER - timedelta(days=age), {"message_id": "am"})
    report = compact_ledger(store, older_than=timedelta(days=30), now=LATER)
    assert report.removed == {"ep_events": 1}
    assert not store.event_seen(inbox, "evt_40d") and store.event_seen(inbox, "evt_8d")
    short = compact_ledger(store, older_than=timedelta(days=1), now=LATER)
    assert short.removed == {"ep_events": 1}
    assert not store.event_seen(inbox, "evt_8d") and store.event_data(inbox, "evt_2d") == {"message_id": "am"}
