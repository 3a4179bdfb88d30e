"""The worker that waits: messages whose proof is not final yet come back for another look.

The engine parks such a message in the ledger (`ledger.waiting`): unanswered, its
proof held, with the time to look again. `serve_waiting` takes due waiting messages and hands
each raw message to the node again, until the engine answers it (FULFILL when the proof
became final, the OOPS when its window ended). It looks at the ledger when the earliest
message this process parked is due, and every `scan` seconds for those other processes
parked or a restart left (a waiting message survives a restart: it is in the ledger).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from envelopay.ledger.waiting import WaitingStore

if TYPE_CHECKING:
    from envelopay.node.agent_node import AgentNode

__all__ = ["serve_waiting"]

_log = logging.getLogger(__name__)
HOLD = timedelta(seconds=30)  # a taken waiting message's next look, should this process die with it


async def serve_waiting(node: AgentNode, stop: asyncio.Event, *, scan: float = 1.0,
                          tick: float = 0.02) -> None:
    store = node.store
    if not isinstance(store, WaitingStore):
        return  # a ledger that keeps no waiting messages: the engine answers at once
    clock = node.engine.clock
    loop = asyncio.get_running_loop()
    last_scan = -scan
    running: set[asyncio.Task[Any]] = set()
    while not stop.is_set():
        now = clock()
        hints = node.waiting_hints
        due_hint = bool(hints) and hints[0] <= now
        if due_hint or loop.time() - last_scan >= scan:
            last_scan = loop.time()
            while hints and hints[0] <= now:  # served by this take; later hints stay
                heapq.heappop(hints)
            for d in store.waiting_take(node.address, now, now + HOLD):
                task = loop.create_task(_again(node, store, d.message_id, d.raw))
                running.add(task)
                task.add_done_callback(running.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), tick)
    if running:
        await asyncio.gather(*running, return_exceptions=True)


async def _again(node: AgentNode, store: WaitingStore, message_id: str, raw: bytes) -> None:
    try:
        outcome = await node.receive(raw, drain_behind=True)
    except Exception:  # the row stays; it comes due again after HOLD
        _log.exception("%s: looking again at %s failed", node.address, message_id)
        return
    if outcome.status not in ("waiting", "busy", "deferred"):
        store.waiting_clear(node.address, message_id)

