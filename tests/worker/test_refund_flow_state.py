"""The worker's flow says what happened to the money (walk item 4): a paid job settled
with a refund whose proof its OOPS task_failed carries moves the flow to `refunded` (the
refund kept in the flow, `show` lists it as sent); a refund still being paid leaves the
flow `prepaid`; a held job leaves it `prepaid`, and `flows`/`show` carry the job's state
beside the flow's. Both ledger backends."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.worker import _jobs_kit as jk

from envelopay.client import views as v
from envelopay.ledger.jobs import Job
from envelopay.ledger.store import Store
from envelopay.testing import mock_rail as k
from envelopay.worker.settle import Settlement

FAILS = jk.task("paid", "tests.worker._jobs_kit:boom", price="100", on_failure="refund")


class _Refunds:
    """The refunds side as the runner sees it: the refund paid (a proof) or still paying."""

    def __init__(self, proof: dict[str, Any] | None) -> None:
        self.proof = proof

    async def on_failed(self, job: Job) -> Settlement:
        refund: dict[str, Any] = {"chain": job.chain, "token": job.token, "amount": str(job.amount),
                                  "wallet": job.payer, "status": "paid" if self.proof else "pending",
                                  "reason": "task_failed"}
        if self.proof is not None:
            refund["proof"] = self.proof
        return Settlement("refunded" if self.proof else "refunding", oops={"refund": refund},
                          fields={"refund": refund})


async def _settled(store: Store, proof: dict[str, Any] | None, oid: str) -> tuple[str, Job]:
    rail = k.DictRail()
    engine = jk.worker(store, jk.config(FAILS), rail)
    out = await engine.handle(k.raw(jk.prepaid(rail, oid, f"tx-{oid}", name="paid", amount=100)))
    assert out.state == "prepaid"
    flow = out.flow_id or ""
    async with jk.running(jk.runner(engine, _Refunds(proof))):
        async with asyncio.timeout(20):
            while (job := store.job_for_flow(flow)) is None or job.answer_id is None:
                await asyncio.sleep(0.02)
    return flow, job


async def test_a_refund_paid_back_moves_the_workers_flow_to_refunded(store: Store) -> None:
    flow, job = await _settled(store, {"tx": "tx-back"}, "o-back")
    assert job.state == "refunded"
    rec = store.get_flow(flow)
    assert rec is not None and rec.state == "refunded"
    assert rec.data["refund"]["proof"] == {"tx": "tx-back"} and rec.data["refund"]["amount"] == "100"
    doc = v.show_doc(rec, store.flow_log(flow), job.state)
    assert doc["flow"]["state"] == "refunded" and doc["flow"]["job"] == "refunded"
    [back] = [p for p in doc["payments"] if p["message"] == "refund"]
    assert back["status"] == "refunded (sent)" and back["amount"] == "100"


async def test_a_refund_still_paying_leaves_the_flow_paid(store: Store) -> None:
    flow, _ = await _settled(store, None, "o-pending")
    rec = store.get_flow(flow)
    assert rec is not None and rec.state == "prepaid" and "refund" not in rec.data


async def test_a_held_job_shows_beside_its_flow(store: Store) -> None:
    rail = k.DictRail()
    hold = jk.task("paid", "tests.worker._jobs_kit:boom", price="100", on_failure="hold")
    engine = jk.worker(store, jk.config(hold), rail)
    out = await engine.handle(k.raw(jk.prepaid(rail, "o-hold", "tx-hold", name="paid", amount=100)))
    flow = out.flow_id or ""
    async with jk.running(jk.runner(engine)):
        async with asyncio.timeout(20):
            while (job := store.job_for_flow(flow)) is None or job.state != "held":
                await asyncio.sleep(0.02)
    rec = store.get_flow(flow)
    assert rec is not None and rec.state == "prepaid"
    jobs = {flow: "held"}
    assert v.flows_rows([rec], jobs)[0][1] == "prepaid · job held"
    assert v.flows_doc(k.WORKER, [rec], None, jobs)["flows"][0]["job"] == "held"
    assert v.flows_rows([rec], {flow: "done"})[0][1] == "prepaid"  # the flow's state already says it
    assert v.flows_rows([rec])[0][1] == "prepaid"  # no job: the flow's state alone
