"""`check_store(factory)`: the Store contract as a public kit any backend can run.

    from envelopay.testing.store import check_store
    check_store(lambda: MyStore(...))

`factory` returns a migrated, empty store; it is called once per check. The checks
use distinct addresses and keys, so a factory may hand back stores over one shared
database. A failed check raises AssertionError naming the check; the names of the
checks that passed are returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.ledger.schema import LATEST
from envelopay.ledger.store import (
    AnswerLimits,
    CallRecord,
    Claim,
    Commit,
    FlowRecord,
    FlowWrite,
    LogEntry,
    ProofKey,
    Store,
)
from envelopay.protocol.messages import Invoice, Oops, OopsError
from envelopay.protocol.outbound import Outbound
from envelopay.testing.kit import run_checks
from envelopay.testing.store_jobs import JOB_CHECKS
from envelopay.testing.store_outbox import OUTBOX_CHECKS

__all__ = ["CHECKS", "check_store"]

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
_seq = itertools.count(1)


def _ns(name: str) -> str:
    return f"{name.replace('_', '-')}-{next(_seq)}@store.test"


def _claim(local: str, mid: str, **kw: object) -> Claim:
    base: dict[str, object] = {
        "local": local,
        "message_id": mid,
        "content_hash": "h",
        "worker": "w1",
        "now": T0,
        "lease_until": T0 + timedelta(seconds=60),
    }
    base.update(kw)
    return Claim(**base)  # type: ignore[arg-type]


def _outbound(local: str, n: int = 1) -> Outbound:
    return Outbound(
        sender=local,
        recipient="peer@store.test",
        message=Invoice(id=f"inv_{n}", amount=10**30 + n, token="USDC", chain="solana", wallet="W"),
        message_id=f"<out{n}.{local}>",
        date=T0 + timedelta(seconds=n),
        in_reply_to="<in@peer>",
        references=("<a@peer>", "<in@peer>"),
        note="ünïcode note",
    )


def _flow(local: str, fid: str, version: int = 0, state: str = "ordered") -> FlowRecord:
    return FlowRecord(
        fid,
        local,
        "peer@store.test",
        "order",
        "payee",
        state,
        version,
        {"order": {"id": "ord_1"}, "n": version},
        T0,
        T0,
    )


def _done(local: str, mid: str, status: str, **kw: Any) -> Commit:
    """The commit that finishes inbound `mid` (worker w1) with outcome `status`."""
    return Commit(local, T0, {"status": status}, message_id=mid, worker="w1", **kw)


def check_claim_and_seen(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("claim")
    assert s.begin_step(_claim(local, "<m1>")).status == "new"
    assert (
        s.commit_step(Commit(local, T0, {"status": "processed", "k": 1}, message_id="<m1>", worker="w1"))
        == "ok"
    )
    again = s.begin_step(_claim(local, "<m1>"))
    assert again.status == "seen", again
    assert again.outcome is not None and again.outcome["k"] == 1
    assert s.inbound_outcome(local, "<m1>") == {"status": "processed", "k": 1}
    # A finished message cannot be finished twice.
    assert s.commit_step(_done(local, "<m1>", "x")) == "lost"
    # Another mailbox's claim on the same Message-ID is its own.
    assert s.begin_step(_claim(_ns("claim-other"), "<m1>")).status == "new"


def check_lease(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("lease")
    assert s.begin_step(_claim(local, "<m>", worker="a")).status == "new"
    assert s.begin_step(_claim(local, "<m>", worker="a")).status == "new"  # own claim: redo
    assert s.begin_step(_claim(local, "<m>", worker="b")).status == "busy"
    late = T0 + timedelta(seconds=61)
    took = s.begin_step(_claim(local, "<m>", worker="b", now=late, lease_until=late + timedelta(seconds=60)))
    assert took.status == "new"  # expired lease: taken over
    assert s.begin_step(_claim(local, "<m>", worker="a")).status == "busy"


def check_replay_keys(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("replay")
    peer = "peer@store.test"
    c1 = _claim(local, "<r1>", sender=peer, protocol_id="pay_1", content_hash="H1")
    assert s.begin_step(c1).status == "new"
    assert s.begin_step(c1).status == "new"  # same owner: idempotent
    ob = _outbound(local, 1)
    outcome = {"status": "processed", "message_id": "<r1>", "outbox": [ob.message_id]}
    commit = Commit(
        local,
        T0,
        outcome,
        message_id="<r1>",
        worker="w1",
        outbox=((ob, None),),
        sender=peer,
        protocol_id="pay_1",
        replay_fate="done",
    )
    assert s.commit_step(commit) == "ok"
    assert s.mark_sent(ob.message_id, T0)
    assert s.outbox_pending(T0 + timedelta(days=1)) == []
    # Same sender, id and content under a new Message-ID: the recorded reply, again.
    re = s.begin_step(_claim(local, "<r2>", sender=peer, protocol_id="pay_1", content_hash="H1"))
    assert re.status == "retransmission", re
    assert re.requeued == (ob.message_id,)
    assert re.outcome is not None and re.outcome["message_id"] == "<r1>"
    pending = s.outbox_pending(T0 + timedelta(days=1))
    assert [p.outbound for p in pending] == [ob]
    assert s.begin_step(_claim(local, "<r2>")).status == "seen"
    # Same id, other content: refused.
    dup = s.begin_step(_claim(local, "<r3>", sender=peer, protocol_id="pay_1", content_hash="H2"))
    assert dup.status == "duplicate_id"
    # Another sender may use the same id.
    other = _claim(local, "<r4>", sender="other@store.test", protocol_id="pay_1", content_hash="H2")
    assert s.begin_step(other).status == "new"
    # A released reservation may be taken again (a pending verdict).
    c5 = _claim(local, "<r5>", sender=peer, protocol_id="pay_5", content_hash="H5")
    assert s.begin_step(c5).status == "new"
    rel = _done(local, "<r5>", "refused", sender=peer, protocol_id="pay_5", replay_fate="release")
    assert s.commit_step(rel) == "ok"
    assert (
        s.begin_step(_claim(local, "<r6>", sender=peer, protocol_id="pay_5", content_hash="H5")).status
        == "new"
    )
    # While the original is unfinished, a copy waits.
    assert (
        s.begin_step(_claim(local, "<r7>", sender=peer, protocol_id="pay_5", content_hash="H5")).status
        == "busy"
    )


def check_proof_keys(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("proof")
    p = ProofKey("solana", f"sig-{next(_seq)}")
    assert s.proof_status(p) is None
    assert s.begin_step(_claim(local, "<p1>", proof=p)).status == "new"
    assert s.proof_status(p) == "held"
    assert s.begin_step(_claim(local, "<p1>", proof=p)).status == "new"  # own reservation
    # Held by an unfinished message: another presenter waits (that presentation may
    # still fail and release it); only a spent proof is refused.
    assert s.begin_step(_claim(local, "<p2>", proof=p)).status == "busy"
    # Held by a message whose claim ran out (its handler died): taken over.
    r = ProofKey("solana", f"sig-{next(_seq)}")
    assert s.begin_step(_claim(local, "<t1>", proof=r)).status == "new"
    assert s.begin_step(_claim(local, "<t2>", proof=r, worker="w2")).status == "busy"
    later = T0 + timedelta(seconds=61)
    taken = _claim(local, "<t3>", proof=r, worker="w2", now=later, lease_until=later + timedelta(seconds=60))
    assert s.begin_step(taken).status == "new"
    assert s.proof_status(r) == "held"
    spend = _done(local, "<p1>", "processed", proof=p, proof_fate="spend", proof_verdict={"status": "ok"})
    assert s.commit_step(spend) == "ok"
    assert s.proof_status(p) == "spent"
    # Spent forever, whoever presents it, to whichever mailbox.
    assert s.begin_step(_claim(_ns("proof-elsewhere"), "<p3>", proof=p)).status == "proof_replayed"
    assert s.begin_step(_claim(local, "<p4>", proof=ProofKey("base", p.key))).status == "new"  # other chain
    q = ProofKey("solana", f"sig-{next(_seq)}")
    assert s.begin_step(_claim(local, "<q1>", proof=q)).status == "new"
    rel = _done(local, "<q1>", "refused", proof=q, proof_fate="release")
    assert s.commit_step(rel) == "ok"
    assert s.proof_status(q) is None
    assert s.begin_step(_claim(local, "<q2>", proof=q)).status == "new"


def _finish(local: str, mid: str, flow: FlowRecord, **kw: Any) -> Commit:
    """The commit that finishes inbound `mid` (worker w1) by writing `flow`."""
    return _done(local, mid, "processed", flow=FlowWrite(flow), **kw)


def check_flow_versions(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("flow")
    fid = f"flow-{next(_seq)}"
    assert s.begin_step(_claim(local, "<f1>")).status == "new"
    ob = _outbound(local, 2)
    create = _finish(local, "<f1>", _flow(local, fid), outbox=((ob, fid),))
    assert s.commit_step(create) == "ok"
    got = s.get_flow(fid)
    assert got is not None and got.version == 1 and got.state == "ordered" and got.data["n"] == 0
    # Finishing an already finished message with a new flow: lost, and the flow not written.
    lost = _finish(local, "<f1>", _flow(local, fid + "-x"))
    assert s.commit_step(lost) == "lost"
    assert s.get_flow(fid + "-x") is None
    # A second creation of the same flow conflicts, and writes nothing at all.
    assert s.begin_step(_claim(local, "<f2>")).status == "new"
    ob3 = _outbound(local, 3)
    again = _finish(local, "<f2>", _flow(local, fid), outbox=((ob3, fid),))
    assert s.commit_step(again) == "conflict"
    assert s.outbox_get(ob3.message_id) is None
    assert s.inbound_outcome(local, "<f2>") is None  # still claimed, not done
    upd = _finish(local, "<f2>", _flow(local, fid, version=1, state="invoiced"))
    assert s.commit_step(upd) == "ok"
    stale = Commit(local, T0, {"status": "sent"}, flow=FlowWrite(_flow(local, fid, version=1, state="paid")))
    assert s.commit_step(stale) == "conflict"
    got = s.get_flow(fid)
    assert got is not None and got.version == 2 and got.state == "invoiced" and got.data["n"] == 1
    assert [f.flow_id for f in s.list_flows(local)] == [fid]
    assert s.get_flow("no-such-flow") is None


def check_refs_and_thread(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("refs")
    peer = "peer@store.test"
    fid = f"flow-{next(_seq)}"
    commit = Commit(
        local,
        T0,
        {"status": "sent"},
        flow=FlowWrite(_flow(local, fid)),
        refs=((peer, local, "ord_9", fid), (peer, peer, "inv_9", fid)),
        message_ids=(("<t1>", fid),),
    )
    assert s.commit_step(commit) == "ok"
    b = s.begin_step(_claim(local, "<in1>", sender=peer, refs=("ord_9", "nope"), thread=("<zz>", "<t1>")))
    assert b.status == "new"
    assert [f.flow_id for f in b.ref_flows] == [fid]
    assert b.missing_refs == ("nope",)
    assert [(m, f.flow_id) for m, f in b.thread_flows] == [("<t1>", fid)]
    # Refs are per peer and per author.
    b2 = s.begin_step(_claim(local, "<in2>", sender="x@store.test", refs=("ord_9",)))
    assert b2.ref_flows == () and b2.missing_refs == ("ord_9",)
    found = s.flow_for_ref(local, peer, peer, "inv_9")
    assert found is not None and found.flow_id == fid
    assert s.flow_for_ref(local, peer, local, "inv_9") is None
    m = s.flow_for_message(local, "<t1>")
    assert m is not None and m.flow_id == fid


def check_outbox(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("outbox")
    obs = [_outbound(local, n) for n in (11, 12, 13)]
    obs.append(
        Outbound(
            local,
            "peer@store.test",
            Oops(note="no", error=OopsError(code="tx_not_found")),
            f"<oops.{local}>",
            T0,
        )
    )
    commit = Commit(local, T0, {"status": "sent"}, outbox=tuple((ob, None) for ob in obs))
    assert s.commit_step(commit) == "ok"
    pending = s.outbox_pending(T0)
    mine = [p for p in pending if p.outbound.sender == local]
    assert [p.outbound for p in mine] == obs  # written order; every field round-trips
    assert all(p.status == "pending" and p.attempts == 0 for p in mine)
    assert s.mark_sent(obs[0].message_id, T0)
    assert s.mark_failed(obs[1].message_id, T0, "451 try later", retry_at=T0 + timedelta(minutes=5))
    assert s.mark_failed(obs[2].message_id, T0, "550 no such user")
    now_ids = [p.outbound.message_id for p in s.outbox_pending(T0 + timedelta(minutes=1))]
    assert obs[0].message_id not in now_ids and obs[1].message_id not in now_ids
    assert obs[2].message_id not in now_ids and obs[3].message_id in now_ids
    later = [p.outbound.message_id for p in s.outbox_pending(T0 + timedelta(minutes=6))]
    assert obs[1].message_id in later
    row = s.outbox_get(obs[2].message_id)
    assert (
        row is not None
        and row.status == "failed"
        and row.attempts == 1
        and row.last_error == "550 no such user"
    )
    sent = s.outbox_get(obs[0].message_id)
    assert sent is not None and sent.status == "sent" and sent.sent_at == T0
    assert not s.mark_sent("<nope@x>", T0)
    # A DSN for a sent row: recorded once, with its status code, and never drained again.
    assert sent.bounce_status is None
    assert s.mark_bounced(obs[0].message_id, T0, "5.1.1", "550 5.1.1 no such user")
    assert not s.mark_bounced(obs[0].message_id, T0, "5.1.1", "again")
    assert not s.mark_bounced("<nope@x>", T0, "5.0.0", "none")
    bounced = s.outbox_get(obs[0].message_id)
    assert bounced is not None and (bounced.status, bounced.bounce_status) == ("bounced", "5.1.1")
    assert bounced.last_error == "550 5.1.1 no such user" and bounced.sent_at == T0
    assert obs[0].message_id not in [p.outbound.message_id for p in s.outbox_pending(T0 + timedelta(days=1))]


def check_held_outbox(factory: Callable[[], Store]) -> None:
    """A commit not answered (RFC 3834, a limit) writes its rows `held`, with the reason
    as last error, never drained; the Auto-Submitted keyword round-trips."""
    s, local = factory(), _ns("held")
    ob = replace(_outbound(local, 21), auto_submitted="auto-replied")
    held = Commit(local, T0, {"status": "sent"}, outbox=((ob, None),), hold="list_mail")
    assert s.commit_step(held) == "ok"
    row = s.outbox_get(ob.message_id)
    assert row is not None and (row.status, row.last_error) == ("held", "list_mail"), row
    assert row.outbound == ob
    assert s.outbox_held(local) == [row]  # listed, by its sender
    assert s.outbox_held(_ns("held-other")) == []
    assert ob.message_id not in [p.outbound.message_id for p in s.outbox_pending(T0 + timedelta(days=1))]
    sent = replace(_outbound(local, 22), auto_submitted="auto-generated")
    assert s.commit_step(Commit(local, T0, {"status": "sent"}, outbox=((sent, None),))) == "ok"
    got = s.outbox_get(sent.message_id)
    assert got is not None and got.status == "pending" and got.outbound.auto_submitted == "auto-generated"


def check_answers(factory: Callable[[], Store]) -> None:
    """The automatic-answer draws: per peer, per thread, within the window, once per
    inbound message; 0 is no limit."""
    s, local = factory(), _ns("answers")
    lim = AnswerLimits(per_peer=3, per_thread=2, window=timedelta(minutes=10))
    a, b = "a@peer.test", "b@peer.test"
    assert s.answer_take(local, a, "<t1>", "<m1>", T0, lim) == "ok"
    assert s.answer_take(local, a, "<t1>", "<m1>", T0, lim) == "ok"  # the same message: drawn once
    assert s.answer_take(local, a, "<t1>", "<m2>", T0, lim) == "ok"
    assert s.answer_take(local, a, "<t1>", "<m3>", T0, lim) == "loop_detected"
    assert s.answer_take(local, a, "<t2>", "<m4>", T0, lim) == "ok"
    assert s.answer_take(local, a, "<t3>", "<m5>", T0, lim) == "rate_limited"
    assert s.answer_take(local, b, "<t4>", "<m6>", T0, lim) == "ok"  # another peer
    assert s.answer_take(local, b, "<t1>", "<m9>", T0, lim) == "ok"  # a's thread: counted per peer
    assert s.answer_take(_ns("answers"), a, "<t1>", "<m7>", T0, lim) == "ok"  # another mailbox
    later = T0 + timedelta(minutes=11)  # the window has passed
    assert s.answer_take(local, a, "<t1>", "<m8>", later, lim) == "ok"
    off = AnswerLimits(per_peer=0, per_thread=0)
    assert all(s.answer_take(local, a, "<t1>", f"<n{i}>", later, off) == "ok" for i in range(5))


def check_events(factory: Callable[[], Store]) -> None:
    s, source = factory(), _ns("events")
    assert not s.event_seen(source, "evt_1")
    assert s.event_done(source, "evt_1", T0)
    assert s.event_seen(source, "evt_1")
    assert not s.event_done(source, "evt_1", T0)  # a redelivery finds it done
    assert not s.event_seen(source + ".other", "evt_1")  # ids are per source
    assert s.event_data(source, "evt_1") is None
    assert s.event_done(source, "<m1@x>", T0, {"message_id": "am_1", "thread_id": "th_1"})
    assert not s.event_done(source, "<m1@x>", T0, {"message_id": "am_2"})  # the first record stays
    assert s.event_data(source, "<m1@x>") == {"message_id": "am_1", "thread_id": "th_1"}


def check_log(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("log")
    fid = f"flow-{next(_seq)}"
    entries = tuple(
        LogEntry(
            fid,
            T0 + timedelta(seconds=i),
            "in" if i % 2 else "out",
            "pay",
            f"<l{i}>",
            f"pay_{i}",
            "a@x",
            "b@x",
            {"amount": str(i)},
            {"status": "ok"} if i == 1 else None,
            "tx_failed" if i == 2 else None,
        )
        for i in range(3)
    )
    assert (
        s.commit_step(Commit(local, T0, {"status": "sent"}, flow=FlowWrite(_flow(local, fid)), log=entries))
        == "ok"
    )
    got = s.flow_log(fid)
    assert [(e.message_id, e.direction, e.body, e.verdict, e.oops, e.at) for e in got] == [
        (e.message_id, e.direction, e.body, e.verdict, e.oops, e.at) for e in entries
    ]
    assert got[0].seq < got[1].seq < got[2].seq


def check_calls(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("calls")
    cid = f"call-{next(_seq)}"
    s.call_add(
        CallRecord(
            cid,
            local,
            "tool@store.test",
            f"<c.{cid}>",
            T0 + timedelta(seconds=30),
            request={"q": 1},
            created_at=T0,
        )
    )
    s.call_add(
        CallRecord(
            cid + "b",
            local,
            "tool@store.test",
            f"<cb.{cid}>",
            T0 + timedelta(seconds=5),
            request={"q": 2},
            created_at=T0,
        )
    )
    got = s.call_get(cid)
    assert got is not None and got.status == "pending" and got.request == {"q": 1}
    by_reply = s.call_for_reply(local, f"<c.{cid}>")
    assert by_reply is not None and by_reply.call_id == cid
    assert {c.call_id for c in s.calls_pending(local)} == {cid, cid + "b"}
    expired = s.calls_expire(T0 + timedelta(seconds=10))
    assert [c.call_id for c in expired if c.local == local] == [cid + "b"]
    assert s.call_resolve(cid, "answered", {"ok": True}, T0 + timedelta(seconds=11))
    assert not s.call_resolve(cid, "failed", None, T0 + timedelta(seconds=12))  # settled once
    assert not s.call_resolve(cid + "b", "answered", {}, T0)  # already timed out
    done = s.call_get(cid)
    assert done is not None and done.status == "answered" and done.result == {"ok": True}
    assert s.calls_pending(local) == []


def check_migrate_idempotent(factory: Callable[[], Store]) -> None:
    s = factory()
    assert s.migrate() == LATEST
    assert s.migrate() == LATEST


CHECKS: tuple[Callable[[Callable[[], Store]], None], ...] = (
    check_claim_and_seen,
    check_lease,
    check_replay_keys,
    check_proof_keys,
    check_flow_versions,
    check_refs_and_thread,
    check_outbox,
    check_held_outbox,
    *OUTBOX_CHECKS,
    check_answers,
    check_log,
    check_calls,
    check_events,
    check_migrate_idempotent,
    *JOB_CHECKS,
)


def check_store(factory: Callable[[], Store]) -> list[str]:
    """Run every contract check against stores made by `factory`; return their names."""
    return run_checks(CHECKS, factory)
