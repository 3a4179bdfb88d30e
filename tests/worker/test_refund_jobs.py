"""Paid work that fails gets its money back, through the real path (garden, DKIM, SQLite
ledger, LiteSVM and eth-tester, the job runner): with the task policy `refund` the buyer is
refunded on the rail it paid on, to the wallet it paid from, and gets OOPS task_failed with
the refund's chain, token, amount and proof; with `hold` the job waits unanswered until the
operator refunds it (`envelopay jobs refund`) or retries it (`jobs retry`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from tests.worker._jobs_kit import Served, failing_jobs, job_in, paid_order

from envelopay.client.demo import PRICE, DemoWorld
from envelopay.ledger.store import FlowRecord

WALLET = {"solana-local": "buyer_sol", "base-local": "buyer_base"}





@pytest.fixture
async def served(demo_world: DemoWorld) -> AsyncIterator[Served]:
    tasks = (("review", "refund"), ("review_hold", "hold"), ("review_hold2", "hold"))
    async with failing_jobs(demo_world, *tasks) as served:
        yield served


def _balance(w: DemoWorld, chain: str) -> int:
    world = w.sol if chain.startswith("solana") else w.base
    return world.usdc_balance(w.wallets[WALLET[chain]]) or 0



def _no_flow(flow: str) -> FlowRecord:
    raise AssertionError(f"no flow {flow}")


async def _buyer_flow_in(w: DemoWorld, flow: str, state: str) -> FlowRecord:
    async with asyncio.timeout(30):
        while True:
            rec = w.buyer.store.get_flow(flow)
            if rec is not None and rec.state == state:
                return rec
            await asyncio.sleep(0.05)


def _oopses(w: DemoWorld, flow: str) -> list[dict[str, Any]]:
    log = w.worker.store.flow_log(flow)
    return [dict(e.body or {}) for e in log if e.direction == "out" and e.type == "oops"]


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_failed_paid_work_is_refunded_and_the_oops_carries_the_refund(
    served: Served, chain: str
) -> None:
    w = served.w
    before = _balance(w, chain)
    flow, bflow = await paid_order(w, "review", chain)
    job = await job_in(w, flow, "refunded")
    assert _balance(w, chain) == before  # paid, then paid back
    [oops] = _oopses(w, flow)
    refund = oops["error"]["refund"]
    assert oops["error"]["code"] == "task_failed"
    assert refund["chain"] == chain and refund["token"] == "USDC" and refund["amount"] == str(PRICE)
    assert refund["wallet"].lower() == w.wallets[WALLET[chain]].lower() and refund["proof"]
    assert job.refund is not None and job.refund["proof"] == refund["proof"]
    # The buyer read the refund, checked it on its rail, and shows the flow refunded.
    mine = await _buyer_flow_in(w, bflow, "refunded")
    assert mine.data["refund"]["verified"] is True and mine.data["refund"]["amount"] == str(PRICE)
    assert mine.data["refused"][-1]["amount"] == str(PRICE)  # the payment it undid, kept


async def test_a_held_job_waits_for_the_operator_who_refunds_it_once(served: Served) -> None:
    from envelopay.node.job_admin import refund_job, retry_job

    w, chain = served.w, "solana-local"
    before = _balance(w, chain)
    flow, _ = await paid_order(w, "review_hold", chain)
    job = await job_in(w, flow, "held")
    assert _oopses(w, flow) == [] and _balance(w, chain) == before - PRICE  # no answer, no refund yet
    again = retry_job(served.cfg, job.job_id, datetime.now(UTC))  # the operator retries: it fails again
    assert again.done and again.job.state == "queued"
    order = (w.worker.store.get_flow(flow) or _no_flow(flow)).data["order"]
    told = w.worker.store.outbox_get(f"<wait.{job.job_id}.queued.r1.0@{served.cfg.agent.domain}>")
    # The buyer's ORDER named `status` (a node speaks it by default): the retry told it `queued`.
    assert "status" in order.get("extensions", []) and told is not None
    assert told.outbound.recipient == job.peer and told.outbound.message.type == "wait"
    job = await job_in(w, flow, "held")
    assert job.attempts >= 1 and _oopses(w, flow) == []
    act = await refund_job(served.cfg, job.job_id, datetime.now(UTC))
    assert act.done and act.job.state == "refunded"
    assert _balance(w, chain) == before
    [oops] = _oopses(w, flow)
    assert oops["error"]["refund"]["amount"] == str(PRICE)
    with pytest.raises(Exception, match="only a held job"):  # a second refund is refused, nothing paid
        await refund_job(served.cfg, job.job_id, datetime.now(UTC))
    assert _balance(w, chain) == before


def test_the_jobs_commands_answer_bad_input_with_exit_2(tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from envelopay.cli.app import app

    cfg = tmp_path / "worker.toml"
    cfg.write_text('[agent]\naddress = "worker@garden.local"\ndomain = "garden.local"\nledger = "w.db"\n')
    run = CliRunner()
    listed = run.invoke(app, ["jobs", "list", "-c", str(cfg), "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output)["jobs"] == []
    for verb in ("refund", "retry"):
        out = run.invoke(app, ["jobs", verb, "job_nope", "-c", str(cfg), "--json"])
        assert out.exit_code == 2, out.output
        doc = json.loads(out.output.splitlines()[0])
        assert doc["error"] == "usage" and doc["field"] == "JOB" and "no job" in doc["detail"]


async def test_show_flow_lists_the_refund_beside_the_payment_it_undid(served: Served) -> None:
    from envelopay.client.views import show_doc

    w = served.w
    flow, bflow = await paid_order(w, "review", "base-local")
    await job_in(w, flow, "refunded")
    rec = await _buyer_flow_in(w, bflow, "refunded")
    doc = show_doc(rec, w.buyer.store.flow_log(bflow))
    assert doc["flow"]["state"] == "refunded"
    money = {p["status"]: p for p in doc["payments"]}
    assert money["refunded (verified)"]["amount"] == str(PRICE)
    assert any(s.startswith("refused") for s in money)  # the PAY it undid, kept


async def test_a_refund_the_rail_does_not_show_is_a_plain_oops_to_the_buyer(served: Served) -> None:
    from envelopay.protocol.messages import Oops, OopsError

    w, chain = served.w, "solana-local"
    flow, bflow = await paid_order(w, "review_hold", chain)
    await job_in(w, flow, "held")
    mine = w.buyer.store.get_flow(bflow)
    assert mine is not None and mine.state == "paid"
    # A "refund" that names the buyer's own payment (to the worker, not to the buyer): not a refund.
    paid = mine.data["payment"]
    forged = {"chain": chain, "token": "USDC", "amount": paid["amount"], "wallet": w.wallets["buyer_sol"],
              "proof": paid["proof"], "status": "paid", "reason": "task_failed"}
    oops = Oops(note="task_failed", error=OopsError(code="task_failed", refund=forged), ref="p-review_hold")
    sent = await w.worker.send(oops, "buyer@garden.local", flow_id=flow)
    await w.worker.drain()
    await w.buyer.wait_outcome(sent.message_id, 30)
    rec = w.buyer.store.get_flow(bflow)
    assert rec is not None and rec.state == "invoiced"  # the plain OOPS: back to the open INVOICE
    assert rec.data["refund"]["verified"] is False


async def test_one_transfer_is_the_refund_of_one_payment_only(served: Served) -> None:
    """A worker that shows one refund transfer for two flows (H11): the buyer reserves the
    refund's proof as it reserves a PAY's, so the second OOPS is not believed — its flow is
    not refunded, it reads as the plain OOPS, the refund kept with why (proof_replayed)."""
    from envelopay.ledger.store import ProofKey
    from envelopay.protocol.messages import Oops, OopsError

    w, chain = served.w, "solana-local"
    flows = [await paid_order(w, name, chain) for name in ("review_hold", "review_hold2")]
    for flow, _ in flows:
        await job_in(w, flow, "held")
    back = await w.pay(w.worker.engine.rails, chain, "USDC", PRICE, w.wallets["buyer_sol"])  # one transfer
    refund = {"chain": chain, "token": "USDC", "amount": str(PRICE), "wallet": w.wallets["buyer_sol"],
              "proof": back, "status": "paid", "reason": "task_failed"}
    for (flow, _), pid in zip(flows, ("p-review_hold", "p-review_hold2"), strict=True):
        oops = Oops(note="task_failed", error=OopsError(code="task_failed", refund=refund), ref=pid)
        sent = await w.worker.send(oops, "buyer@garden.local", flow_id=flow)
        await w.worker.drain()
        await w.buyer.wait_outcome(sent.message_id, 30)
    first = w.buyer.store.get_flow(flows[0][1])
    assert first is not None and first.state == "refunded" and first.data["refund"]["verified"] is True
    rail = w.buyer.engine.rails[chain]
    assert w.buyer.store.proof_status(ProofKey(chain, rail.proof_key(back))) == "spent"
    second = w.buyer.store.get_flow(flows[1][1])
    assert second is not None and second.state == "invoiced"  # the plain OOPS: back to the open INVOICE
    assert second.data["refund"]["verified"] is False
    assert second.data["refund"]["verdict"]["reason"] == "proof_replayed"
