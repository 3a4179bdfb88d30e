"""Walk item 18, through the real path (garden, DKIM, ledgers, LiteSVM and eth-tester): a
buyer that pays an INVOICE too much gets the excess back, and the worker's FULFILL says so
(`refund`, reason `overpaid`); the buyer checks the transfer on its rail and its `show`
lists "came back: overpaid (verified)". Both ledgers for the check: tests/engine/test_fulfill_excess.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from envelopay.client import views as v
from envelopay.client.buyer import Answer
from envelopay.client.commands import ClientRun
from envelopay.client.demo import PRICE, DemoWorld
from envelopay.client.report import client_report
from envelopay.engine.outcome import Outcome
from envelopay.protocol.messages import Fulfill, Invoice, Order, Pay
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refunds import refunder_for

WALLET = {"solana-local": "buyer_sol", "base-local": "buyer_base"}
EXCESS = 50_000


def _key(rail: Any) -> bytes:
    kp = getattr(rail, "keypair", None)
    return bytes(kp) if kp is not None else bytes(rail._key)


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_the_buyer_sees_the_excess_come_back(demo_world: DemoWorld, chain: str) -> None:
    w = demo_world
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    rails = w.worker.engine.rails
    app.refunder = refunder_for(w.worker.store, rails=rails, keys={r.name: _key(r) for r in rails.values()},
                                owner="worker")
    task = {"name": "word_count", "text": "a b c", "rail": f"{chain}/USDC"}
    _, inv, bflow = await w.exchange(Order(id="o-over", task=task))
    assert isinstance(inv, Invoice)
    proof = await w.pay(w.buyer_rails, chain, "USDC", PRICE + EXCESS, inv.wallet)
    pay = Pay(id="p-over", amount=PRICE + EXCESS, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)
    sent = await w.buyer.send(pay, "worker@garden.local", flow_id=bflow)
    outcome = await w.worker.wait_outcome(sent.message_id, 60)
    row = w.worker.store.outbox_get(outcome.outbox[0])
    reply = row.outbound.message if row is not None else None
    assert isinstance(reply, Fulfill) and reply.refund is not None, reply
    assert reply.refund["reason"] == "overpaid" and reply.refund["amount"] == str(EXCESS)
    assert reply.refund["wallet"].lower() == w.wallets[WALLET[chain]].lower()
    async with asyncio.timeout(30):
        while (rec := w.buyer.store.get_flow(bflow)) is None or rec.state != "fulfilled":
            await asyncio.sleep(0.05)
    assert rec.data["excess"]["verified"] is True, rec.data["excess"]
    [money] = [r for r in v.money_rows(rec, lambda _c, _t: 6) if r[0] == "REFUND overpaid"]
    assert money[3].startswith("0.05") and money[6] == "came back: overpaid (verified)"
    # The buyer's `pay --wait` summary says why money arrives.
    answer = Answer(message=reply, outcome=Outcome(status="processed", flow_id=bflow, state="fulfilled"))
    rep = client_report("pay", ClientRun("PAY", sent, answer=answer), timeout=5, decimals=lambda _c, _t: 6)
    assert any(line.startswith("the worker says 0.05 USDC") and "(overpaid)" in line for line in rep.lines)
    assert rep.code == 0


async def test_a_prepaid_jobs_fulfill_says_the_excess_came_back(demo_world: DemoWorld) -> None:
    """A prepaid ORDER paying too much, its work run as a job: the excess goes back when the
    work is taken on, kept in the worker's flow, and the runner's FULFILL says it."""
    from envelopay.worker.runner import JobRunner

    w, chain = demo_world, "solana-local"
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    rails = w.worker.engine.rails
    app.refunder = refunder_for(w.worker.store, rails=rails, keys={r.name: _key(r) for r in rails.values()},
                                owner="worker")
    runner = JobRunner(w.worker.engine, app.app.tasks, poll=0.05, after_answer=w.worker.drain)
    app.jobs, app.on_job = True, (lambda _job: runner.wake())
    wallet = app.wallet(chain, "USDC")
    assert wallet is not None
    proof = await w.pay(w.buyer_rails, chain, "USDC", PRICE + EXCESS, wallet)
    order = Order(v="0.2.0", id="o-pre-job", task={"name": "word_count", "text": "a b"},
                  amount=PRICE + EXCESS, token="USDC", chain=chain, proof=proof)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        sent = await w.buyer.send(order, "worker@garden.local")
        async with asyncio.timeout(60):
            while (rec := w.buyer.store.get_flow(sent.flow_id)) is None or rec.state != "fulfilled":
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    [job] = w.worker.store.job_list("worker@garden.local")  # the work ran as a job
    assert job.state == "done" and job.amount == PRICE + EXCESS
    [ful] = [e.body for e in w.buyer.store.flow_log(sent.flow_id) if e.type == "fulfill"]
    assert ful is not None and ful["refund"]["reason"] == "overpaid"
    assert ful["refund"]["amount"] == str(EXCESS)
    assert rec.data["excess"]["verified"] is True
