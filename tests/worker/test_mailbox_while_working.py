"""Long handlers no longer stop the mailbox (issue 31, Done-when): in the demo world —
the garden, DKIM, SQLite ledgers, the local Solana chain — the worker takes 16 ORDERs of
a task whose handler sleeps (a plain function, in threads) as jobs, and answers a WHICH
while all 16 sleep; then every job is FULFILLed once, and a paid ORDER (INVOICE, PAY on
the chain) becomes a job that carries what a refund would need."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from envelopay.client.demo import PRICE, WORKER, DemoWorld
from envelopay.config import TaskConfig, WorkerConfig
from envelopay.node.jobs import job_runner
from envelopay.protocol.messages import Fulfill, Invoice, Methods, Order, Pay, Which

NAP = 8.0  # long beside the time 16 ORDERs take to arrive on a loaded machine


class NapWorld(DemoWorld):
    """The demo world whose worker also sells `nap` (sleeps in a thread), 16 at once."""

    def _configs(self, records: dict[str, str], port: int | None) -> tuple[WorkerConfig, WorkerConfig]:
        worker, buyer = super()._configs(records, port)
        nap = TaskConfig.model_validate({"name": "nap", "handler": "tests.worker._jobs_kit:nap_sync",
                                         "schema": "tests.worker._jobs_kit:Nap", "concurrency": 16,
                                         "time_limit": 60})
        self.worker_cfg = worker.model_copy(update={"tasks": [*worker.tasks, nap]})
        return self.worker_cfg, buyer


async def _until(pred: Any, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.02)


async def test_a_which_is_answered_while_16_jobs_sleep(tmp_path: Any) -> None:
    world = NapWorld(tmp_path, None)
    await world.setup()
    stop = asyncio.Event()
    try:
        runner = job_runner(world.worker, world.worker_cfg, poll=0.2)
        assert runner is not None
        loop = asyncio.create_task(runner.run(stop))
        store = world.worker.store
        flows = []
        for n in range(16):
            sent = await world.buyer.send(Order(id=f"nap{n}", task={"name": "nap", "seconds": NAP}), WORKER)
            flows.append(sent.flow_id)
        await _until(lambda: len(store.job_list(WORKER, ("running",))) == 16)
        started = time.monotonic()
        _, reply, _ = await world.exchange(Which(id="w-busy"))
        took = time.monotonic() - started
        assert isinstance(reply, Methods) and reply.which_ref == "w-busy"
        assert took < NAP / 2, took  # answered well before any sleeper woke
        assert len(store.job_list(WORKER, ("running",))) == 16  # all still asleep
        await _until(lambda: all((world.buyer.store.get_flow(f) or _no).state == "fulfilled" for f in flows))
        done = store.job_list(WORKER, ("done",), 100)
        assert len(done) == 16 and all(j.answer_id for j in done)
        fulfills = [e for f in {j.flow_id for j in done} for e in store.flow_log(f) if e.type == "fulfill"]
        assert len(fulfills) == 16  # one FULFILL per job

        # A paid ORDER on the chain: INVOICE, PAY, a job with the payer's wallet, FULFILL.
        task = {"name": "word_count", "text": "paid work waits in line"}
        _, inv, bflow = await world.exchange(Order(id="paid1", task=task))
        assert isinstance(inv, Invoice)
        proof = await world.pay(world.buyer_rails, inv.chain, "USDC", inv.amount, inv.wallet)
        pay = Pay(id="pay1", amount=inv.amount, token="USDC", chain=inv.chain, proof=proof,
                  invoice_ref=inv.id)
        paid_out, now_reply, _ = await world.exchange(pay, flow_id=bflow)
        # Accepted; the answer comes later (a buyer speaking `status` is told the job is queued).
        assert paid_out.state == "paid" and (now_reply is None or getattr(now_reply, "state", "") == "queued")
        job = store.job_for_flow(paid_out.flow_id or "")
        assert job is not None and job.amount == PRICE and job.chain == inv.chain
        assert inv.chain == "solana-local" and job.payer == world.wallets["buyer_sol"]
        await _until(lambda: (world.buyer.store.get_flow(bflow) or _no).state == "fulfilled")
        answer = [e for e in world.buyer.store.flow_log(bflow) if e.type == "fulfill"]
        assert len(answer) == 1 and answer[0].body is not None
        assert Fulfill.model_validate(answer[0].body).result == {"words": 5, "characters": 23}
        stop.set()
        await loop
    finally:
        stop.set()
        await world.teardown()


class _No:
    state = "none"


_no = _No()
