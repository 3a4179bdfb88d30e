"""The job part of the Store contract (envelopay.ledger.jobs), run by `check_store`.

Each check takes a factory of migrated stores, as the rest of the kit does, and uses
addresses of its own, so stores over one shared database do not see each other's jobs.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from envelopay.ledger.jobs import Job, JobMove, job_id_for
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, Store
from envelopay.protocol.messages import Fulfill
from envelopay.protocol.outbound import Outbound

__all__ = ["JOB_CHECKS", "sample_job"]

T0 = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
_seq = itertools.count(1)


def _local(name: str) -> str:
    return f"{name.replace('_', '-')}-{next(_seq)}@jobs.test"


def sample_job(local: str, n: int = 1, task: str = "slow", amount: int = 10**30 + 7) -> Job:
    """A paid job of `local` (amounts past 64 bits: stored exactly)."""
    fid = f"flow_{local.split('@')[0]}_{n}"
    return Job(
        job_id=job_id_for(fid), local=local, peer="buyer@jobs.test", flow_id=fid, task=task,
        params={"name": task, "text": "ünïcode"}, order_id=f"ord_{n}", ref=f"pay_{n}",
        message_id=f"<pay{n}@buyer>",
        chain="solana", token="USDC", amount=amount, payer="PayerWallet", proof={"tx": "TxSig1"},
        proof_key="TxSig1",
        policy="refund", idempotent=False, state="queued", attempts=0,
        created_at=T0 + timedelta(seconds=n), updated_at=T0 + timedelta(seconds=n),
    )


def _flow(local: str, fid: str) -> FlowRecord:
    return FlowRecord(fid, local, "buyer@jobs.test", "order", "payee", "paid", 0, {}, T0, T0)


def check_job_with_step(factory: Callable[[], Store]) -> None:
    """A job written with its step's commit reads back whole; a redo keeps the first."""
    s = factory()
    local = _local("job_step")
    job = sample_job(local)
    flow = FlowWrite(_flow(local, job.flow_id))
    commit = Commit(local, T0, {"status": "processed"}, flow=flow, job_new=job)
    assert s.commit_step(commit) == "ok"
    got = s.job_get(job.job_id)
    assert got is not None and got.state == "queued" and got.amount == job.amount
    assert got.params == job.params and got.payer == "PayerWallet" and got.proof == {"tx": "TxSig1"}
    assert got.times() == {"queued": job.created_at}
    assert s.job_for_flow(job.flow_id) == got
    assert not s.job_add(replace(job, task="other"))  # one job per flow
    assert s.job_get(job.job_id) == got
    assert [j.job_id for j in s.job_list(local)] == [job.job_id]


def check_job_claims(factory: Callable[[], Store]) -> None:
    """Claims hand out due jobs oldest first, each to one owner; an expired lease is
    taken over and says so; a live one is not."""
    s = factory()
    local = _local("job_claim")
    for n in (1, 2, 3):
        assert s.job_add(sample_job(local, n))
    assert s.job_add(sample_job(local, 4, task="other"))
    lease = T0 + timedelta(seconds=30)
    first = s.job_claim("w1", local, "slow", T0, lease, 2)
    assert [(j.job_id, over) for j, over in first] == [(sample_job(local, n).job_id, False) for n in (1, 2)]
    assert all(j.state == "running" and j.attempts == 1 and j.lease_owner == "w1" for j, _ in first)
    second = s.job_claim("w2", local, "slow", T0, lease, 5)
    assert [j.job_id for j, _ in second] == [sample_job(local, 3).job_id]
    assert s.job_claim("w2", local, "slow", T0 + timedelta(seconds=29), lease, 5) == []
    assert s.job_renew(first[0][0].job_id, "w1", T0 + timedelta(seconds=90))
    assert not s.job_renew(first[0][0].job_id, "w2", T0 + timedelta(seconds=90))
    later = s.job_claim("w2", local, "slow", T0 + timedelta(seconds=31), T0 + timedelta(seconds=60), 5)
    taken = {j.job_id: (j, over) for j, over in later}
    assert set(taken) == {sample_job(local, n).job_id for n in (2, 3)}
    assert all(over and j.attempts == 2 and j.lease_owner == "w2" for j, over in taken.values())


def check_job_moves(factory: Callable[[], Store]) -> None:
    """A move applies only from the states it names (and under its owner's lease); its
    timestamp and fields are kept; a move inside a commit that does not apply writes
    nothing of that commit."""
    s = factory()
    local = _local("job_move")
    job = sample_job(local)
    assert s.job_add(job)
    (running, _), = s.job_claim("w1", local, "slow", T0, T0 + timedelta(seconds=30), 1)
    t1 = T0 + timedelta(seconds=5)
    assert not s.job_move(JobMove(job.job_id, ("running",), "failed", t1, owner="w2"))
    assert s.job_move(JobMove(job.job_id, ("running",), "failed", t1, {"error": "boom"}, owner="w1"))
    assert not s.job_move(JobMove(job.job_id, ("running",), "done", t1))
    got = s.job_get(job.job_id)
    assert got is not None and got.state == "failed" and got.error == "boom" and got.at["failed"] == t1
    ob = Outbound(sender=local, recipient=job.peer, message=Fulfill(id="ful_1", order_ref="ord_1", result=1),
                  message_id=f"<ful.{local}>", date=t1)
    wrong = JobMove(job.job_id, ("running",), "done", t1, {"answer_id": ob.message_id})
    out = ((ob, job.flow_id),)
    assert s.commit_step(Commit(local, t1, {"status": "sent"}, outbox=out, job_move=wrong)) == "lost"
    assert s.outbox_get(ob.message_id) is None
    refund = {"chain": "solana", "amount": str(job.amount)}
    right = JobMove(job.job_id, ("failed",), "refunded", t1, {"answer_id": ob.message_id, "refund": refund})
    assert s.commit_step(Commit(local, t1, {"status": "sent"}, outbox=out, job_move=right)) == "ok"
    got = s.job_get(job.job_id)
    assert got is not None and got.state == "refunded" and got.answer_id == ob.message_id
    assert got.refund == refund and s.outbox_get(ob.message_id) is not None
    assert [j.job_id for j in s.job_list(local, states=("refunded",))] == [job.job_id]
    assert s.job_list(local, states=("queued", "running")) == []
    assert s.job_list(local, unanswered=True) == []
    assert running.attempts == 1


JOB_CHECKS: tuple[Callable[[Callable[[], Store]], None], ...] = (
    check_job_with_step,
    check_job_claims,
    check_job_moves,
)
