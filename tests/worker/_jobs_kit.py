"""What the job tests share: declared tasks (their schema and handlers live here, so a
worker process started by a test imports them by name), a worker engine taking orders
as jobs, and the messages that make jobs: a free ORDER and a prepaid ORDER on the test
rail (envelopay.testing.mock_rail DictRail)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envelopay.client.demo import PRICE
from envelopay.config import WorkerConfig, config_from_dict
from envelopay.engine import Engine
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Invoice, Order, Pay
from envelopay.testing import mock_rail as k
from envelopay.worker.app import WorkerApp, WorkerApplication
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.refunds import refunder_for
from envelopay.worker.runner import JobRunner
from envelopay.worker.settle import FailurePolicy


class Nap(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = 0.0
    text: str = ""
    marker: str = ""  # a file an attempt appends a line to (counts the starts)


async def nap(p: Nap) -> dict[str, Any]:
    if p.marker:
        with Path(p.marker).open("a") as f:
            f.write(f"{os.getpid()}\n")
    await asyncio.sleep(p.seconds)
    return {"slept": p.seconds, "text": p.text}


def nap_sync(p: Nap) -> dict[str, Any]:
    time.sleep(p.seconds)
    return {"slept": p.seconds}


def boom(p: Nap) -> dict[str, Any]:
    if p.marker:
        with Path(p.marker).open("a") as f:
            f.write("start\n")
    raise RuntimeError("the handler broke")


def task(name: str, handler: str, **kw: Any) -> dict[str, Any]:
    return {"name": name, "handler": handler, "schema": "tests.worker._jobs_kit:Nap", **kw}


def config(*tasks: dict[str, Any]) -> WorkerConfig:
    return config_from_dict({
        "agent": {"address": k.WORKER, "domain": "garden.test"},
        "accept": [{"chain": k.CHAIN, "token": k.TOKEN, "wallet": k.WORKER_WALLET}],
        "tasks": list(tasks) or [task("nap", "tests.worker._jobs_kit:nap")],
    })


def worker(store: Store, cfg: WorkerConfig, rail: k.DictRail | None = None, **kw: Any) -> Engine:
    """An engine whose WorkerApplication takes every order on as a job."""
    rail = rail or k.DictRail()
    app = WorkerApplication(WorkerApp(cfg, rails={k.CHAIN: rail}), jobs=True)
    return Engine(store, address=k.WORKER, domain="garden.test", rails={k.CHAIN: rail}, app=app, **kw)


def runner(engine: Engine, policy: FailurePolicy | None = None, **kw: Any) -> JobRunner:
    app = engine.app
    assert isinstance(app, WorkerApplication)
    kw.setdefault("poll", 0.05)
    r = JobRunner(engine, app.app.tasks, policy=policy, **kw)
    app.on_job = lambda _job: r.wake()
    return r


@contextlib.asynccontextmanager
async def running(*runners: JobRunner) -> AsyncIterator[None]:
    """The runners run while the block does; after it they are stopped and waited for (a
    runner finishes or hands over what it runs, as at a stop)."""
    stop = asyncio.Event()
    loops = [asyncio.create_task(r.run(stop)) for r in runners]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*loops)


def free_order(oid: str, name: str = "nap", **fields: Any) -> Order:
    return Order(id=oid, task={"name": name, **fields})


def prepaid(rail: k.DictRail, oid: str, tx: str, name: str = "nap", amount: int = 0,
            payer: str = "W-payer", **fields: Any) -> Order:
    """A v0.2 prepaid ORDER whose proof (transaction `tx` on the test rail) paid `amount`."""
    rail.txs[tx] = k.Tx(to=k.WORKER_WALLET, token=k.TOKEN, amount=amount, payer=payer)
    order = Order(v="0.2.0", id=oid, task={"name": name, **fields}, amount=amount, token=k.TOKEN,
                  chain=k.CHAIN, proof={"tx": tx})
    bound = k.bind(order, wallet=payer)
    assert isinstance(bound, Order)
    return bound


async def job_in(world: Any, flow: str, *states: str, timeout: float = 60.0) -> Any:
    """The worker's job for `flow` (a DemoWorld's worker) once it is in one of `states`."""
    async with asyncio.timeout(timeout):
        while True:
            job = world.worker.store.job_for_flow(flow)
            if job is not None and job.state in states:
                return job
            await asyncio.sleep(0.05)


@dataclass
class Served:
    w: Any  # the DemoWorld
    cfg: WorkerConfig  # the worker's config as an operator's command (`jobs refund`) loads it
    runner: JobRunner


def _key(rail: Any) -> bytes:
    kp = getattr(rail, "keypair", None)
    return bytes(kp) if kp is not None else bytes(rail._key)


@contextlib.asynccontextmanager
async def failing_jobs(w: Any, *tasks: tuple[str, str]) -> AsyncIterator[Served]:
    """A DemoWorld's worker taking paid orders as jobs of tasks that always fail
    (tests/worker/_refund_tasks.py), each (name, on_failure): "refund" refunds at once,
    "hold" waits held for the operator; its job runner runs while the block does."""
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    rails = w.worker.engine.rails
    keys = {r.name: _key(r) for r in rails.values()}
    doc = app.app.config.model_dump()
    doc["tasks"] = [{"name": name, "handler": "tests.worker._refund_tasks:fail",
                     "schema": "tests.worker._refund_tasks:Review", "price": str(PRICE),
                     "on_failure": policy} for name, policy in tasks]
    base = doc.pop("base_dir")
    cfg = config_from_dict(doc, base_dir=base)
    local = {"solana": w.sol, "base": w.base}
    cfg = cfg.model_copy(update={"rails": {n: local[n].rail_options(k) for n, k in keys.items()}})
    app.app = WorkerApp(cfg, rails=rails)
    app.refunder = refunder_for(w.worker.store, rails=rails, keys=keys, owner="worker")
    runner = JobRunner(w.worker.engine, app.app.tasks, policy=RefundOnFailure(app.refunder), poll=0.05,
                       after_answer=w.worker.drain)
    app.jobs, app.on_job = True, (lambda _job: runner.wake())
    stop = asyncio.Event()
    loop = asyncio.create_task(runner.run(stop))
    try:
        yield Served(w, cfg, runner)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 30)


async def paid_order(w: Any, name: str, chain: str) -> tuple[str, str]:
    """A DemoWorld's buyer ORDERs task `name`, is INVOICEd and PAYs on `chain`: (the
    worker's flow id, the buyer's flow id)."""
    task = {"name": name, "text": "x", "rail": f"{chain}/USDC"}
    _, inv, bflow = await w.exchange(Order(id=f"o-{name}", task=task))
    assert isinstance(inv, Invoice)
    proof = await w.pay(w.buyer_rails, chain, "USDC", inv.amount, inv.wallet)
    pay = Pay(id=f"p-{name}", amount=inv.amount, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)
    out, _, _ = await w.exchange(pay, flow_id=bflow)
    assert out.flow_id is not None
    return out.flow_id, bflow
