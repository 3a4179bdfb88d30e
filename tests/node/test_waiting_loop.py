"""The node's waiting loop wakes for every look again it was asked for.

Regression (issue 13, p99 of the added latency at 1.1 s): the node kept only the earliest
hint and forgot it when that one was served, so a message due a little later waited for
the next full ledger scan. Here the scan is an hour away: each waiting message must still be
handed back when its own hint comes due, on a real SQLite ledger."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from envelopay.engine import Outcome
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Claim, ProofKey
from envelopay.ledger.waiting import WaitingMessage
from envelopay.node.waiting import serve_waiting
from envelopay.testing.store import T0

LOCAL = "worker@x.test"


@dataclass
class Clock:
    now: datetime = T0

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Engine:
    clock: Clock


@dataclass
class Node:
    """What serve_waiting uses of an AgentNode: its store, its engine's clock, the hints
    and receive (which records the raw messages handed back)."""

    store: SqliteStore
    engine: Engine
    address: str = LOCAL
    waiting_hints: list[datetime] = field(default_factory=list)
    handed_back: list[bytes] = field(default_factory=list)

    async def receive(self, raw: bytes, *, drain_behind: bool = False) -> Outcome:
        self.handed_back.append(raw)
        return Outcome("processed", raw.decode())


def park(store: SqliteStore, n: int, due: datetime) -> None:
    mid = f"<pay{n}@peer>"
    claim = Claim(LOCAL, mid, "h", "w", T0, T0 + timedelta(minutes=1), sender="peer@x.test",
                  protocol_id=f"pay-{n}", proof=ProofKey("solana-local", f"SIG{n}"))
    assert store.begin_step(claim).status == "new"
    waiting = WaitingMessage(LOCAL, mid, mid.encode(), T0, due, T0 + timedelta(seconds=60), 1, "pending")
    assert store.waiting_put(waiting, worker="w", now=T0)


async def test_each_hint_is_served_without_waiting_for_a_scan(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ledger.db")
    clock = Clock()
    node: Any = Node(store, Engine(clock))
    first, second = T0 + timedelta(milliseconds=100), T0 + timedelta(milliseconds=300)
    park(store, 1, first)
    park(store, 2, second)
    node.waiting_hints.extend([first, second])
    stop = asyncio.Event()
    # First pass scans (as at start); afterwards only hints can wake the loop.
    clock.now = T0
    loop = asyncio.create_task(serve_waiting(node, stop, scan=3600.0, tick=0.005))
    try:
        async def handed(n: int) -> None:
            while len(node.handed_back) < n:
                await asyncio.sleep(0.005)

        clock.now = first
        await asyncio.wait_for(handed(1), 5)
        assert node.handed_back == [b"<pay1@peer>"]
        assert node.waiting_hints == [second]  # the later hint is kept
        clock.now = second
        await asyncio.wait_for(handed(2), 5)  # an hour's scan away, if the hint were lost
        assert node.handed_back == [b"<pay1@peer>", b"<pay2@peer>"]
        assert node.waiting_hints == []
    finally:
        stop.set()
        await loop
    try:
        # Both answered (not waiting any more): their rows are cleared.
        assert store.waiting_count(LOCAL) == 0
    finally:
        store.close()
