"""`AgentNode.send` delivers its own message beside a drain in progress, on SQLite and
PostgreSQL: before, a send waited for the whole batch a drain was sending (each row an
LMTP round trip and the garden's fsync), which made the WHICH's p99 under load 10-17x
idle (bench/jobs.py, issue 31)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outbox import OutboxDrainer, SendResult
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.node.agent_node import AgentNode
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound

A, B = "a@garden.local", "b@garden.local"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    s: Store = SqliteStore(str(tmp_path / "ledger.db")) if dsn is None else PostgresStore(dsn, max_size=2)
    s.migrate()
    yield s
    s.close()


async def test_send_goes_out_beside_a_stuck_drain(store: Store) -> None:
    release = asyncio.Event()
    started: list[str] = []
    sent: list[str] = []

    async def hook(out: Outbound, raw: bytes) -> SendResult:
        started.append(out.message_id)
        if out.message.id.startswith("b"):  # type: ignore[union-attr]
            await release.wait()  # the batch's deliveries hang (a slow hop)
        sent.append(out.message_id)
        return SendResult("sent")

    engine = Engine(store, address=A, domain="garden.local", rails={}, app=BaseApplication(),
                    clock=lambda: NOW)
    node = AgentNode(engine, OutboxDrainer(store, hook, clock=lambda: NOW, parallel=2), None)
    batch = [(await engine.send(Which(id=f"b{i}"), B)).message_id for i in range(4)]
    draining = asyncio.create_task(node.drain())
    while len(started) < 2:  # the drain is in its sends now, two at once
        await asyncio.sleep(0.001)
    own = await asyncio.wait_for(node.send(Which(id="own"), B), 5)
    assert sent == [own.message_id]  # delivered before send returned, the batch still stuck
    release.set()
    assert sorted((await draining).sent) == sorted(batch)
    await node.close()
    assert sorted(sent) == sorted([*batch, own.message_id])  # each once
    assert store.outbox_pending(NOW) == []
