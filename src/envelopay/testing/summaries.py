"""`check_summaries(factory)`: the read-only summaries the worker's console reads from a
ledger (envelopay.ledger.summaries), as a kit any backend can run.

    from envelopay.testing.summaries import check_summaries
    check_summaries(lambda: MyStore(...))

`factory` returns a migrated store that is also a `Summaries`; each check uses its own
address, so stores over one shared database do. A failed check raises AssertionError
naming it; the names of the checks that passed are returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, LogEntry, Store
from envelopay.ledger.summaries import FlowCount, FlowFilter, Summaries
from envelopay.protocol.messages import Oops, OopsError
from envelopay.protocol.outbound import Outbound
from envelopay.testing.kit import run_checks

__all__ = ["SUMMARY_CHECKS", "check_summaries"]

T0 = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
_seq = itertools.count(1)


def _ns(name: str) -> str:
    return f"{name}-{next(_seq)}@summaries.test"


def _write(s: Store, local: str, fid: str, *, kind: str = "order", state: str = "ordered", peer: str = "p@x",
           at: datetime = T0, log: tuple[LogEntry, ...] = (), outbox: tuple[Outbound, ...] = ()) -> None:
    record = FlowRecord(fid, local, peer, kind, "payee", state, 0, {}, at, at)
    commit = Commit(local, at, {"status": "processed"}, flow=FlowWrite(record), log=log,
                    outbox=tuple((ob, fid) for ob in outbox))
    assert s.commit_step(commit) == "ok", fid


def _summaries(s: Store) -> Summaries:
    assert isinstance(s, Summaries), f"{type(s).__name__} has no summaries"
    return s


def check_flow_counts_and_filters(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("flows")
    r = _summaries(s)
    plan = [("order", "fulfilled", "a@x"), ("order", "fulfilled", "b@x"), ("order", "invoiced", "a@x"),
            ("exchange", "accepted", "b@x"), ("order", "fulfilled", "a@x")]
    for n, (kind, state, peer) in enumerate(plan):
        _write(s, local, f"fl-{local}-{n}", kind=kind, state=state, peer=peer, at=T0 + timedelta(seconds=n))
    _write(s, _ns("other"), f"fl-{local}-x", state="fulfilled")  # another agent's: never counted
    assert r.flow_counts(local) == [FlowCount("order", "fulfilled", 3), FlowCount("exchange", "accepted", 1),
                                    FlowCount("order", "invoiced", 1)]
    assert ids(r.find_flows(local, FlowFilter())) == ["4", "3", "2", "1", "0"]  # newest first
    assert ids(r.find_flows(local, FlowFilter(peer="A@X"))) == ["4", "2", "0"]
    assert ids(r.find_flows(local, FlowFilter(kind="order", state="fulfilled"))) == ["4", "1", "0"]
    assert ids(r.find_flows(local, FlowFilter(state="nothing"))) == []
    last = r.find_flows(local, FlowFilter(), limit=2)[-1]
    page = r.find_flows(local, FlowFilter(), limit=2, before=(last.updated_at, last.flow_id))
    assert ids(page) == ["2", "1"]
    assert r.flow_counts(_ns("empty")) == []


def check_change_mark(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("mark")
    r = _summaries(s)
    first = r.change_mark(local)
    assert r.change_mark(local) == first  # reading moves nothing
    _write(s, local, f"mk-{local}-0")
    flowed = r.change_mark(local)
    assert flowed != first
    _write(s, _ns("other"), f"mk-{local}-x", at=T0 + timedelta(days=1))  # another agent's flow
    assert r.change_mark(local)[0] == flowed[0]
    _write(s, local, f"mk-{local}-1", at=T0 - timedelta(days=1), outbox=(_oops(local, 90, "x", T0),))
    mailed = r.change_mark(local)
    assert mailed[1] != flowed[1]  # an older flow, but a new outbox row


def ids(flows: list[FlowRecord]) -> list[str]:
    return [f.flow_id.rsplit("-", 1)[1] for f in flows]


def _pay_entry(fid: str, at: datetime, amount: str, status: str, oops: str | None = None) -> LogEntry:
    body = {"type": "pay", "amount": amount, "chain": "solana", "token": "USDC"}
    verdict = {"status": status, "observed_amount": amount}
    return LogEntry(fid, at, "in", "pay", f"<{fid}-{amount}>", "pay_1", "p@x", "w@x", body, verdict, oops)


def check_paid_entries(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("paid")
    r = _summaries(s)
    old, new = T0 - timedelta(days=40), T0
    _write(s, local, f"pe-{local}-old", at=old, log=(_pay_entry(f"pe-{local}-old", old, "5", "ok"),))
    fid = f"pe-{local}-new"
    log = (
        LogEntry(fid, new, "in", "order", "<o>", "ord_1", "p@x", "w@x", {"type": "order"}),
        _pay_entry(fid, new + timedelta(seconds=1), "7", "ok"),
        _pay_entry(fid, new + timedelta(seconds=2), "9", "mismatch", "amount_mismatch"),
    )
    _write(s, local, fid, at=new + timedelta(seconds=2), log=log)
    got = r.paid_entries(local, T0 - timedelta(days=30))
    assert [(e.flow_id, (e.verdict or {}).get("status"), e.oops) for e in got] == [
        (fid, "ok", None), (fid, "mismatch", "amount_mismatch")]
    assert got[0].body == log[1].body and got[0].at == log[1].at
    assert len(r.paid_entries(local, old)) == 3
    assert r.paid_entries(local, T0 + timedelta(days=1)) == []


def _oops(local: str, n: int, code: str | None, at: datetime) -> Outbound:
    error = OopsError(code=code) if code is not None else None
    message = Oops(id=f"oops_{n}", note=f"note {n}", error=error)
    return Outbound(sender=local, recipient="p@x", message=message, message_id=f"<oops{n}.{local}>", date=at)


def check_oops_sent(factory: Callable[[], Store]) -> None:
    s, local = factory(), _ns("oops")
    r = _summaries(s)
    codes = ["invalid_field", "proof_not_found", "invalid_field", None]
    for n, code in enumerate(codes):
        at = T0 + timedelta(minutes=n)
        _write(s, local, f"oo-{local}-{n}", at=at, outbox=(_oops(local, n, code, at),))
    assert r.oops_counts(local, T0 - timedelta(days=1)) == {"invalid_field": 2, "-": 1, "proof_not_found": 1}
    assert r.oops_counts(local, T0 + timedelta(minutes=2)) == {"-": 1, "invalid_field": 1}
    recent = r.oops_recent(local, limit=3)
    assert [(o.code, o.note, o.recipient, o.status) for o in recent] == [
        (None, "note 3", "p@x", "pending"), ("invalid_field", "note 2", "p@x", "pending"),
        ("proof_not_found", "note 1", "p@x", "pending")]
    assert recent[0].flow_id == f"oo-{local}-3" and recent[0].message_id == f"<oops3.{local}>"
    assert r.oops_counts(_ns("quiet"), T0) == {} and r.oops_recent(_ns("quiet")) == []


def check_jobs_and_refunds_read(factory: Callable[[], Store]) -> None:
    """An agent with no jobs and no refunds: no counts (or none yet, before the tables exist)."""
    r = _summaries(factory())
    assert r.job_counts(_ns("jobs")) in (None, {})
    assert r.recent_jobs(_ns("jobs")) == []
    assert r.refund_counts(_ns("refunds")) in (None, {})
    assert r.recent_refunds(_ns("refunds")) == []


SUMMARY_CHECKS: tuple[Callable[[Callable[[], Store]], None], ...] = (
    check_flow_counts_and_filters,
    check_change_mark,
    check_paid_entries,
    check_oops_sent,
    check_jobs_and_refunds_read,
)


def check_summaries(factory: Callable[[], Any]) -> list[str]:
    """Run every summary check against stores made by `factory`; return their names."""
    return run_checks(SUMMARY_CHECKS, factory)
