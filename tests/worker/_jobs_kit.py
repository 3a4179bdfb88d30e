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
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from envelopay.config import WorkerConfig, config_from_dict
from envelopay.engine import Engine
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Order
from envelopay.testing import mock_rail as k
from envelopay.worker.app import WorkerApp, WorkerApplication
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
