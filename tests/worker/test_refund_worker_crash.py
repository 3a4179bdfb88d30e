"""Failed paid work refunds once across a SIGKILL, through the job runner in a real
process, on both chains and both ledgers: a buyer pays an INVOICE on the chain (served over
JSON-RPC, so every process sees it), the worker takes the paid work on as a job, its
handler fails, and the runner's refunds policy pays the buyer back — the runner process is
SIGKILLed after the refund is signed or after it is broadcast, a new runner process takes
over, and the buyer's balance grows by the price exactly once, with one OOPS task_failed
that carries the refund."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.worker import _refund_worker as rw

from envelopay.devnet.plugins import dev_chain
from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.messages import Invoice, Oops, Order, Pay
from envelopay.rails.registry import make
from envelopay.testing import mock_rail as k

from .test_refund_crash import _handler, _options

# Run as a module from the repository root: the runner imports its task handler as tests.worker._refund_tasks.
ROOT = Path(__file__).resolve().parents[2]
PROC = "tests.worker._refund_worker"


async def _start(args: list[str]) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", PROC, *args,
                                                stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.strip() == b"ready", line
    return proc


async def _until(pred: Any, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("chain", ["solana", "base"])
@pytest.mark.parametrize("point", ["after_sign", "after_broadcast"])
async def test_a_runner_killed_mid_refund_refunds_the_failed_job_once(
    backend: str, chain: str, point: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    world = dev_chain(chain).local()
    native = 10**18 if chain == "base" else 2 * 10**9
    worker_w, buyer_w = world.new_wallet(native=native), world.new_wallet(native=native, usdc=5 * rw.PRICE)
    where = str(tmp_path / "ledger.db") if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    store = SqliteStore(where) if backend == "sqlite" else PostgresStore(where, max_size=2)
    async with JsonRpcServer(_handler(world)) as node:
        options = _options(world, node.url)
        seller = make(chain, {**options, "keypair": worker_w.key})
        buyer = make(chain, {**options, "keypair": buyer_w.key})
        engine = rw.engine(store, world.chain, seller, worker_w.address)
        out = await engine.handle(k.raw(Order(id="o1", task={"name": "review", "text": "x"}),
                                        date=datetime.now(UTC)))
        row = store.outbox_get(out.outbox[0])
        assert row is not None and isinstance(row.outbound.message, Invoice)
        inv = row.outbound.message
        proof = await buyer.pay(chain=world.chain, token="USDC", amount=inv.amount, recipient=inv.wallet)
        pay = Pay(id="p1", amount=inv.amount, token="USDC", chain=world.chain, proof=proof,
                  invoice_ref=inv.id)
        paid = await engine.handle(k.raw(pay, in_reply_to=row.outbound.message_id, date=datetime.now(UTC)))
        job = store.job_for_flow(paid.flow_id or "")
        assert job is not None and job.state == "queued" and job.payer is not None
        before = world.usdc_balance(buyer_w.address)

        args = [where, world.chain, json.dumps(options), worker_w.key.hex(), worker_w.address]
        first = await _start([*args, point])
        assert await asyncio.wait_for(first.wait(), 60) == -9  # killed mid-refund
        moved = world.usdc_balance(buyer_w.address)
        assert moved == (before or 0) + (rw.PRICE if point == "after_broadcast" else 0)
        second = await _start([*args, "-"])
        try:
            await _until(lambda: (store.job_get(job.job_id) or job).answer_id is not None)
            await asyncio.sleep(0.5)  # more polls and scans: nothing more is paid or said
        finally:
            second.kill()
            await second.wait()
    final = store.job_get(job.job_id)
    assert final is not None and final.state == "refunded"
    assert world.usdc_balance(buyer_w.address) == (before or 0) + rw.PRICE  # once
    answers = [e for e in store.flow_log(job.flow_id) if e.direction == "out" and e.type == "oops"]
    assert len(answers) == 1
    answer = store.outbox_get(final.answer_id or "")
    assert answer is not None and isinstance(answer.outbound.message, Oops)
    error = answer.outbound.message.error
    assert error is not None and error.code == "task_failed"
    assert (error.model_extra or {})["refund"]["amount"] == str(rw.PRICE)
    store.close()
