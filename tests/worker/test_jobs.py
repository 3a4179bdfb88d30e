"""Orders taken on as jobs: the step commits the job and answers nothing; the runner
runs it off the event loop and answers once — FULFILL with the result (flow fulfilled,
result hash on the job) or, failed for good, OOPS task_failed settled by the policy.
Both ledger backends."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.worker import _jobs_kit as jk

from envelopay.ledger.jobs import Job
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Fulfill, Oops
from envelopay.testing import mock_rail as k
from envelopay.worker.runner import result_hash
from envelopay.worker.settle import Settlement

PAID = jk.task("paid", "tests.worker._jobs_kit:nap", price="100")


async def _until(pred: object, timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():  # type: ignore[operator]
            await asyncio.sleep(0.02)


def _answers(store: Store, flow_id: str) -> list[object]:
    return [e.type for e in store.flow_log(flow_id) if e.direction == "out"]


async def test_a_free_order_is_a_job_answered_by_the_runner(store: Store) -> None:
    engine = jk.worker(store, jk.config())
    out = await engine.handle(k.raw(jk.free_order("o1", seconds=0.05, text="héllo")))
    assert out.status == "processed" and out.outbox == () and out.state == "ordered"
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None and job.state == "queued" and job.amount == 0 and job.chain is None
    assert job.params == {"name": "nap", "seconds": 0.05, "text": "héllo"} and job.ref == "o1"
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: (store.job_get(job.job_id) or job).state == "done")
    done = store.job_get(job.job_id)
    assert done is not None and done.answer_id is not None
    row = store.outbox_get(done.answer_id)
    assert row is not None and isinstance(row.outbound.message, Fulfill)
    assert row.outbound.message.order_ref == "o1"
    assert done.result_hash == result_hash(row.outbound.message.result) == result_hash({"slept": 0.05,
                                                                                        "text": "héllo"})
    assert set(done.times()) == {"queued", "running", "done"}
    flow = store.get_flow(out.flow_id or "")
    assert flow is not None and flow.state == "fulfilled"
    assert _answers(store, out.flow_id or "") == ["fulfill"]


async def test_a_prepaid_order_records_what_a_refund_needs(store: Store) -> None:
    rail = k.DictRail()
    engine = jk.worker(store, jk.config(PAID), rail)
    order = jk.prepaid(rail, "o2", "tx-prepaid", name="paid", amount=150, payer="W-payer")
    out = await engine.handle(k.raw(order, message_id="<prepaid@client.test>"))
    assert out.status == "processed" and out.outbox == () and out.state == "prepaid"
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None and job.paid
    assert (job.chain, job.token, job.amount, job.payer) == (k.CHAIN, k.TOKEN, 150, "W-payer")
    assert job.proof_key == "tx-prepaid" and job.proof is not None and job.proof["tx"] == "tx-prepaid"
    assert job.message_id == "<prepaid@client.test>" and job.policy == "refund" and not job.idempotent
    again = await engine.handle(k.raw(order, message_id="<prepaid@client.test>"))
    assert again.repeat == "message_id" and store.job_list(k.WORKER) == [job]  # one job per flow


async def test_a_failing_handler_is_retried_then_answered_task_failed(store: Store, tmp_path: Path) -> None:
    marker = tmp_path / "starts"
    cfg = jk.config(jk.task("nap", "tests.worker._jobs_kit:boom", attempts=2))
    engine = jk.worker(store, cfg)
    out = await engine.handle(k.raw(jk.free_order("o3", marker=str(marker))))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: (store.job_get(job.job_id) or job).answer_id is not None)
    failed = store.job_get(job.job_id)
    assert failed is not None and failed.state == "failed" and failed.attempts == 2
    assert marker.read_text().count("start") == 2
    assert failed.error is not None and "RuntimeError" in failed.error
    row = store.outbox_get(failed.answer_id or "")
    assert row is not None and isinstance(row.outbound.message, Oops)
    oops = row.outbound.message
    assert oops.error is not None and oops.error.code == "task_failed" and oops.ref == "o3"
    assert _answers(store, out.flow_id or "") == ["oops"]


class _Holds:
    """A policy standing for the refunds side: records each call, holds the job."""

    def __init__(self) -> None:
        self.calls: list[Job] = []

    async def on_failed(self, job: Job) -> Settlement:
        self.calls.append(job)
        return Settlement("held", answer=False, fields={"refund": {"status": "held"}})


async def test_a_paid_job_that_fails_is_settled_by_its_policy_once(store: Store) -> None:
    rail = k.DictRail()
    hold = jk.task("paid", "tests.worker._jobs_kit:boom", price="100", on_failure="hold")
    engine = jk.worker(store, jk.config(hold), rail)
    out = await engine.handle(k.raw(jk.prepaid(rail, "o4", "tx-hold", name="paid", amount=100)))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None and job.policy == "hold"
    policy = _Holds()
    async with jk.running(jk.runner(engine, policy)):
        await _until(lambda: (store.job_get(job.job_id) or job).state == "held")
        await asyncio.sleep(0.3)  # several polls and a scan: asked once
    held = store.job_get(job.job_id)
    assert held is not None and held.answer_id is None and held.refund == {"status": "held"}
    assert [j.state for j in policy.calls] == ["failed"]
    assert _answers(store, out.flow_id or "") == []  # nothing said while held


async def test_a_bad_result_fails_the_job(store: Store) -> None:
    cfg = jk.config(jk.task("nap", "tests.worker._jobs_kit:nap", time_limit=0.2))
    engine = jk.worker(store, cfg)
    out = await engine.handle(k.raw(jk.free_order("o5", seconds=5)))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: (store.job_get(job.job_id) or job).answer_id is not None)
    failed = store.job_get(job.job_id)
    assert failed is not None and failed.state == "failed" and "time limit" in (failed.error or "")
    assert json.loads(json.dumps(failed.times(), default=str))  # every state has a time


async def test_two_workers_on_one_ledger_share_the_jobs(store: Store, tmp_path: Path) -> None:
    """Two runners (two owners, two connections) claim from one ledger: each job runs
    once and is answered once, and both take a share."""
    from envelopay.ledger.postgres import PostgresStore
    from envelopay.ledger.sqlite import SqliteStore

    other = (SqliteStore(store.path) if isinstance(store, SqliteStore)
             else PostgresStore(store.dsn, max_size=4))  # type: ignore[attr-defined]
    try:
        cfg = jk.config(jk.task("nap", "tests.worker._jobs_kit:nap", concurrency=2))
        engines = [jk.worker(store, cfg, worker_id="w-a"), jk.worker(other, cfg, worker_id="w-b")]
        marker = tmp_path / "starts"
        for n in range(8):
            await engines[n % 2].handle(k.raw(jk.free_order(f"s{n}", seconds=0.2, marker=str(marker))))
        runners = [jk.runner(e) for e in engines]
        async with jk.running(*runners):
            await _until(lambda: len(store.job_list(k.WORKER, ("done",))) == 8)
        jobs = store.job_list(k.WORKER)
        assert all(j.attempts == 1 and j.answer_id for j in jobs)
        assert len(marker.read_text().splitlines()) == 8  # each ran once
        assert all(runner.started for runner in runners)  # both took a share
        assert not set(runners[0].started) & set(runners[1].started)
        assert all(_answers(store, j.flow_id) == ["fulfill"] for j in jobs)
    finally:
        other.close()


async def test_stopping_lets_a_job_end_or_hands_it_over_at_once(store: Store) -> None:
    """A stop waits `grace` for the job under way; past it the job is cut, its lease
    ended, and the next runner takes it over at once (an idempotent task runs again)."""
    cfg = jk.config(jk.task("nap", "tests.worker._jobs_kit:nap", idempotent=True))
    engine = jk.worker(store, cfg)
    out = await engine.handle(k.raw(jk.free_order("g1", seconds=0.4)))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None
    first = jk.runner(engine, grace=5.0)
    async with jk.running(first):
        await _until(lambda: job.job_id in first.started)  # under way (seen in-process: no poll can miss it)
    assert (store.job_get(job.job_id) or job).state == "done"  # it ended within the grace

    out = await engine.handle(k.raw(jk.free_order("g2", seconds=30)))
    cut = store.job_for_flow(out.flow_id or "")
    assert cut is not None
    second = jk.runner(engine, owner="w-cut", grace=0.0, lease=60.0)
    async with jk.running(second):
        await _until(lambda: (store.job_get(cut.job_id) or cut).state == "running")
    left = store.job_get(cut.job_id)
    assert left is not None and left.state == "running" and left.lease_until is not None
    assert left.lease_until <= datetime.now(UTC)  # its 60 s lease ended at the stop
    taken = store.job_claim("w-next", k.WORKER, "nap", left.lease_until + timedelta(microseconds=1),
                            left.lease_until + timedelta(seconds=60), 5)
    assert [(j.job_id, over) for j, over in taken] == [(cut.job_id, True)]


class _Broken:
    async def on_failed(self, job: Job) -> Settlement:
        return Settlement("done")  # not a state a failed job may be settled in


async def test_a_policy_answering_a_state_the_table_forbids_leaves_the_job_held(store: Store) -> None:
    engine = jk.worker(store, jk.config(jk.task("nap", "tests.worker._jobs_kit:boom")))
    out = await engine.handle(k.raw(jk.free_order("b1")))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None
    runner = jk.runner(engine, _Broken())
    async with jk.running(runner):
        await _until(lambda: (store.job_get(job.job_id) or job).state == "held")
    assert _answers(store, out.flow_id or "") == []  # nothing said; an operator decides


async def test_the_runner_outlives_a_ledger_that_is_away_for_a_while(store: Store) -> None:
    """Claims that fail (the ledger unreachable: StoreError) are tried again at the next
    poll; the runner does not die, and the job is answered once the ledger is back."""
    from envelopay.errors import StoreError

    engine = jk.worker(store, jk.config())
    out = await engine.handle(k.raw(jk.free_order("away1")))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None
    real, failures = store.job_claim, [3]

    def away(*args: object, **kw: object) -> object:
        if failures[0]:
            failures[0] -= 1
            raise StoreError("PostgreSQL ledger: connection refused")
        return real(*args, **kw)  # type: ignore[arg-type]

    store.job_claim = away  # type: ignore[method-assign,assignment]  # the outage, injected at the seam
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: (store.job_get(job.job_id) or job).state == "done")
    assert failures == [0] and _answers(store, out.flow_id or "") == ["fulfill"]
