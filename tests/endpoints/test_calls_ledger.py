"""Client calls kept in the engine's ledger, on SQLite and on PostgreSQL: they survive a
restart, settle once from the right endpoint, and time out."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from envelopay.endpoints.calls import CallClient, LedgerCalls
from envelopay.endpoints.reference import reference_responder
from envelopay.endpoints.toolmail import build_tool_mail

KV = reference_responder("garden.local")
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        from envelopay.ledger.sqlite import SqliteStore

        def make() -> Any:
            s = SqliteStore(str(tmp_path / "ledger.db"))
            s.migrate()
            return s
    else:
        from envelopay.ledger.postgres import PostgresStore

        dsn = request.getfixturevalue("pg_dsn")

        def make() -> Any:
            s = PostgresStore(dsn)
            s.migrate()
            return s
    return make


async def test_calls_in_the_ledger_survive_restart_and_time_out(open_store: Any) -> None:
    outbox: list[bytes] = []

    async def send(raw: bytes, sender: str, to: str) -> None:
        outbox.append(raw)

    clock = Clock()
    store = open_store()
    client = CallClient(LedgerCalls(store, local="a@garden.local", clock=clock), address="a@garden.local",
                        domain="garden.local", send=send, clock=clock, poll_interval=0.01)
    first, _ = await client.send("kv@garden.local", {"key": "spec.version"}, timeout=30)
    second, _ = await client.send("kv@garden.local", {"key": "usdc.decimals"}, timeout=5)
    store.close()

    store = open_store()  # a restart: a new connection, the same ledger
    books = LedgerCalls(store, local="a@garden.local", clock=clock)
    client = CallClient(books, address="a@garden.local", domain="garden.local", send=send, clock=clock,
                        poll_interval=0.01)
    assert {r.call_id for r in books.pending()} == {first, second}
    reply = KV.respond(outbox[0], now=NOW, domain="garden.local")
    assert reply is not None
    forged = build_tool_mail(sender="evil@garden.local", recipient="a@garden.local", subject="Re",
                             payload={"status": "ok", "result": 1}, human="x", message_id="<e@x>", now=NOW,
                             in_reply_to=books.get(first).message_id)  # type: ignore[union-attr]
    assert client.on_reply(forged) is None
    res = client.on_reply(reply)
    assert res is not None and res.ok and res.result == {"key": "spec.version", "value": "0.1.0"}
    assert client.on_reply(reply) is None  # settles once

    waiter = asyncio.create_task(client.wait(second))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    clock.now = NOW + timedelta(seconds=6)
    late = await asyncio.wait_for(waiter, 10)
    assert late.status == "timeout" and late.error == {"code": "timeout"}
    assert books.pending() == []
    store.close()
