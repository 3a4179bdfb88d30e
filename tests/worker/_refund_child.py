"""One worker process settling one failed paid job (tests/worker/test_refund_crash.py):
opens the ledger, builds its rail over JSON-RPC with the worker's key, asks the refunds
failure policy to settle the job, and prints the settlement. With a crash point it is
SIGKILLed there, as a worker dying mid-refund would be.

argv: LEDGER CHAIN RAIL_OPTIONS_JSON KEY_HEX PAYER AMOUNT CRASH|-"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from datetime import UTC, datetime, timedelta

from envelopay.ledger.jobs import Job
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.rails.registry import make
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.refunds import refunder_for


async def main(ledger: str, chain: str, options: str, key: str, payer: str, amount: int, crash: str) -> None:
    store = PostgresStore(ledger, max_size=1) if ledger.startswith("postgresql://") else SqliteStore(ledger)
    rail = make(chain.split("-")[0], json.loads(options))
    keys = {rail.name: bytes.fromhex(key)}
    # A short lease: the next process recovers what this one leaves at once.
    refunder = refunder_for(store, rails={chain: rail}, keys=keys, owner="worker-1",
                            lease=timedelta(seconds=1))

    def die(point: str) -> None:
        if point == crash:
            os.kill(os.getpid(), signal.SIGKILL)

    refunder.crash = die
    now = datetime.now(UTC)
    job = Job(job_id="job_crash", local="worker@garden.local", peer="buyer@garden.local",
              flow_id="flow_crash", task="review", params={}, order_id="o1", ref="p1",
              message_id="<p1@garden.local>", chain=chain, token="USDC", amount=amount, payer=payer,
              proof={"tx": "paid"}, proof_key="paid", policy="refund", idempotent=False, state="failed",
              attempts=1, created_at=now, updated_at=now, error="handler raised", at={})
    settled = await RefundOnFailure(refunder).on_failed(job)
    print(json.dumps({"state": settled.state, "oops": dict(settled.oops)}), flush=True)
    store.close()


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], a[4], int(a[5]), a[6]))
