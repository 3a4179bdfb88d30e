"""A tool call through the real walled garden: LMTP server, Maildirs, pickup, reply."""

from __future__ import annotations

import asyncio
from pathlib import Path

from envelopay.endpoints.calls import CallClient, CallStore
from envelopay.endpoints.reference import reference_responder
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.node.runtime import serve_call_replies, serve_responders


async def test_call_kv_responder_over_garden(tmp_path: Path) -> None:
    kv = reference_responder("garden.local")
    addresses = ["kv@garden.local", "agent@garden.local"]
    async with GardenServer(tmp_path / "garden", addresses, open_garden=True) as garden:
        transport = GardenTransport(garden.endpoint)
        stop = asyncio.Event()
        client = CallClient(CallStore(tmp_path / "calls.db"), address="agent@garden.local",
                            domain="garden.local", send=transport.send)
        tasks = [
            asyncio.create_task(serve_responders({garden.maildir(kv.address): kv}, transport,
                                                 domain="garden.local", stop=stop)),
            asyncio.create_task(serve_call_replies(client, garden.maildir("agent@garden.local"), stop=stop)),
        ]
        try:
            ok = await client.call("kv@garden.local", {"key": "spec.version"}, timeout=30)
            missing = await client.call("kv@garden.local", {"key": "absent"}, timeout=30)
            # The non-blocking form: send returns at once; the reply is matched later.
            call_id, _ = await client.send("kv@garden.local", {"key": "usdc.decimals"}, timeout=30)
            decimals = await asyncio.wait_for(client.wait(call_id), 30)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            await transport.close()
    assert ok.ok and ok.result == {"key": "spec.version", "value": "0.1.0"}
    assert missing.status == "error" and missing.error is not None and missing.error["code"] == "not_found"
    assert decimals.result == {"key": "usdc.decimals", "value": "6"}
    assert client.store.pending() == []


async def test_call_outside_garden_fails_as_value(tmp_path: Path) -> None:
    from envelopay.errors import TransportError

    async with GardenServer(tmp_path / "garden", ["agent@garden.local"], open_garden=True) as garden:
        transport = GardenTransport(garden.endpoint)
        client = CallClient(CallStore(tmp_path / "calls.db"), address="agent@garden.local",
                            domain="garden.local", send=transport.send)
        try:
            try:
                await client.send("stranger@elsewhere.example", {"key": "x"}, timeout=30)
                raised = False
            except TransportError:
                raised = True
        finally:
            await transport.close()
    assert raised
    rec = client.store.pending()
    assert rec == []  # the failed call is settled as failed, not left pending
    rows = client.store._db.execute("SELECT status FROM agent_calls").fetchall()
    assert [r["status"] for r in rows] == ["failed"]
