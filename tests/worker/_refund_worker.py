"""A worker's job runner in a process of its own, for the refund SIGKILL test
(tests/worker/test_refund_worker_crash.py): it runs the failing paid task `review` of the
worker on the ledger at WHERE, with the refunds failure policy paying from the worker's key
over JSON-RPC, and is SIGKILLed at CRASH (a point of the refund) when one is named.

argv: WHERE CHAIN RAIL_OPTIONS_JSON KEY_HEX WORKER_WALLET CRASH|-"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from envelopay.config import WorkerConfig, config_from_dict
from envelopay.engine import Engine
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.rails.interface import Rail
from envelopay.rails.registry import make
from envelopay.worker.app import WorkerApp, WorkerApplication
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.refunds import refunder_for
from envelopay.worker.runner import JobRunner

WORKER = "worker@garden.test"
PRICE = 1_000_000


def config(chain: str, wallet: str) -> WorkerConfig:
    return config_from_dict({
        "agent": {"address": WORKER, "domain": "garden.test", "worker_id": "w1"},
        "accept": [{"chain": chain, "token": "USDC", "wallet": wallet}],
        "tasks": [{"name": "review", "handler": "tests.worker._refund_tasks:fail",
                   "schema": "tests.worker._refund_tasks:Review",
                   "price": str(PRICE)}],
    })


def engine(store: Any, chain: str, rail: Rail, wallet: str) -> Engine:
    app = WorkerApplication(WorkerApp(config(chain, wallet), rails={chain: rail}), jobs=True)
    return Engine(store, address=WORKER, domain="garden.test", rails={chain: rail}, app=app, worker_id="w1")


async def main(where: str, chain: str, options: str, key: str, wallet: str, crash: str) -> None:
    store = PostgresStore(where, max_size=2) if where.startswith("postgresql://") else SqliteStore(where)
    rail = make(chain.split("-")[0], json.loads(options))
    worker = engine(store, chain, rail, wallet)
    keys = {rail.name: bytes.fromhex(key)}
    refunder = refunder_for(store, rails={chain: rail}, keys=keys, owner="w1", lease=timedelta(seconds=1))

    def die(point: str) -> None:
        if point == crash:
            os.kill(os.getpid(), signal.SIGKILL)

    refunder.crash = die
    app = worker.app
    assert isinstance(app, WorkerApplication)
    policy = RefundOnFailure(refunder)
    runner = JobRunner(worker, app.app.tasks, policy=policy, owner="w1", poll=0.05, lease=2.0)
    print("ready", flush=True)
    await runner.run(asyncio.Event())


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
