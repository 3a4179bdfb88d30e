"""A worker process for the shared-Maildir test: the real AgentNode serving one Maildir
(the pump, the engine, the outbox drainer) on a shared ledger, until SIGTERM.

    python -m tests.ledger._maildir_worker sqlite|postgres TARGET WORKER_ID INBOX REPLIES

Replies are delivered into the REPLIES Maildir (a real Maildir delivery: tmp → new).
The claim leases are short (2 s) so a SIGKILLed worker's claims run out quickly.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from datetime import timedelta
from pathlib import Path

from tests.ledger._worker import open_store

from envelopay.engine import Engine
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.mail.maildir import deliver_file
from envelopay.node.agent_node import AgentNode
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


class MaildirTransport:
    """Hands each reply to the buyer's Maildir (what the garden's LMTP does, minus LMTP)."""

    def __init__(self, maildir: Path) -> None:
        self.maildir = maildir

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        await asyncio.to_thread(deliver_file, self.maildir, raw)

    async def close(self) -> None:
        return None


async def main(backend: str, target: str, worker_id: str, inbox: str, replies: str) -> None:
    store = open_store(backend, target)
    rail = k.DictRail()
    engine = Engine(
        store,
        address=k.WORKER,
        domain="garden.test",
        rails={k.CHAIN: rail},
        app=WorkerApp(rail),
        worker_id=worker_id,
        lease=timedelta(seconds=2),
    )
    transport = MaildirTransport(Path(replies))
    drainer = OutboxDrainer(store, DirectHook(transport), owner=worker_id, lease=timedelta(seconds=2))
    node = AgentNode(engine, drainer, None, Path(inbox), transport)
    node.retry_delays = (0.0, 0.05, 0.2, 0.5)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    # As `worker serve` does (node/serve.py): rows another worker claimed and died
    # holding come due when its lease ends, and nothing but a timer drains them then.
    retry = asyncio.create_task(_drain_every(node, stop, 0.5))
    await node.serve(stop)
    await retry
    await node.drain()
    store.close()


async def _drain_every(node: AgentNode, stop: asyncio.Event, interval: float) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            await node.drain()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main(*sys.argv[1:6]))
