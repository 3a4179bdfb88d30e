"""A worker process for the reliability tests: handles messages from a file through a
real Engine on a shared ledger, printing one line per message handled.

    python _worker.py sqlite|postgres TARGET WORKER_ID MSGFILE INDICES

INDICES is a comma-separated list of positions in MSGFILE (a JSON list of base64 raw
messages). A `busy` outcome (another worker holds the claim) is retried until done.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from envelopay.engine import Engine
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

# Both stores are imported at the top: the reliability tests fork this script from a
# server that has run its top level (tests/_zygote.py), so each start skips the imports.


def open_store(backend: str, target: str) -> Store:
    if backend == "sqlite":
        return SqliteStore(target)
    return PostgresStore(target, max_size=1)


def make_rail(n: int) -> k.DictRail:
    """The same deterministic transactions in every process: tx-0 .. tx-(n-1) each pay
    the worker PRICE units. Their block time is this process's start: the PAYs of phase 2
    are handled by processes started after phase 1 issued the INVOICEs, so each transfer
    is younger than the INVOICE it settles, as the engine requires."""
    made = datetime.now(UTC)
    return k.DictRail({f"tx-{i}": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, time=made) for i in range(n)})


async def main(backend: str, target: str, worker_id: str, msgfile: str, indices: str, ntx: int) -> None:
    raws = [base64.b64decode(r) for r in json.loads(Path(msgfile).read_text())]
    store = open_store(backend, target)
    rail = make_rail(ntx)
    engine = Engine(
        store,
        address=k.WORKER,
        domain="garden.test",
        rails={k.CHAIN: rail},
        app=WorkerApp(rail),
        worker_id=worker_id,
    )
    for i in (int(x) for x in indices.split(",") if x):
        while True:
            outcome = await engine.handle(raws[i])
            if outcome.status != "busy":
                break
            await asyncio.sleep(0.005)
        print(i, outcome.status, outcome.oops or "-", flush=True)
    store.close()


if __name__ == "__main__":
    b, t, w, f, idx, ntx = sys.argv[1:7]
    asyncio.run(main(b, t, w, f, idx, int(ntx)))
