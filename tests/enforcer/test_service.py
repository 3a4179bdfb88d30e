"""The running service over HTTP: real concurrency from many asyncio clients."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from envelopay.enforcer.client.http_client import EnforcerClient, OperatorClient
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server

from .conftest import OPERATOR, Sink


async def test_64_concurrent_sends_against_an_hourly_cap_of_20(service: str, sink: Sink) -> None:
    async with OperatorClient(service, OPERATOR) as op:
        _, token = await op.create_agent("burst", "burst@agents.test", allow=("partner.test",), hourly=20)

    async def one(i: int) -> str:
        async with EnforcerClient(service, token) as client:
            d = await client.send(
                {"to": "bob@partner.test", "from": "burst@agents.test", "subject": f"n{i}", "text": "x"}
            )
            return d.status

    statuses = await asyncio.gather(*(one(i) for i in range(64)))
    assert statuses.count("sent") == 20
    assert statuses.count("pending_approval") == 44
    assert len(sink.messages) == 20


async def test_16_concurrent_approvals_execute_once(service: str, sink: Sink) -> None:
    async with OperatorClient(service, OPERATOR) as op:
        _, token = await op.create_agent("slow", "slow@agents.test")
        async with EnforcerClient(service, token) as client:
            d = await client.send({"to": "bob@partner.test", "from": "slow@agents.test", "subject": "s"})
        assert d.status == "pending_approval" and d.approval_id
        approval_id = d.approval_id

    async def approve() -> tuple[int, str]:
        async with OperatorClient(service, OPERATOR) as client:
            status, data = await client.decide(approval_id, "approve")
            return status, str(data["state"])

    results = await asyncio.gather(*(approve() for _ in range(16)))
    winners = [r for r in results if r[0] == 200]
    assert winners == [(200, "SENT")]
    # Each loser gets a conflict naming the state it saw (APPROVED while executing, or SENT).
    assert all(code == 409 and state in ("APPROVED", "SENT") for code, state in results if code != 200)
    assert len(sink.messages) == 1


async def test_operator_api_refuses_agent_tokens_and_agent_api_answers_dispositions(
    service: str, sink: Sink
) -> None:
    async with OperatorClient(service, OPERATOR) as op:
        agent, token = await op.create_agent("a1", "a1@agents.test", allow=("partner.test",))
        assert agent["summary"] == "20/hr · 100/day · 1 allowlisted"
    async with httpx.AsyncClient(base_url=service) as http:
        for path in ("/v1/agents", "/v1/approvals"):
            r = await http.get(path, headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 401
        r = await http.post("/v1/agents/a1/kill", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401
        r = await http.post("/v1/send", content=b"not json", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["status"] == "blocked"
        huge = {"to": "bob@partner.test", "from": "a1@agents.test", "subject": "s", "text": "x" * 2_000_000}
        r = await http.post("/v1/send", json=huge, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and r.json()["reason"].startswith("body too large")
        r = await http.post("/v1/agents", json={"name": "x", "address": "bad"},
                            headers={"Authorization": f"Bearer {OPERATOR}"})
        assert r.status_code == 400 and "address" in r.json()["error"]
        # A forged agent id in the payload: still a1 (its pinned sender, its counters).
        async with OperatorClient(service, OPERATOR) as op:
            other, _ = await op.create_agent("a2", "a2@agents.test")
        r = await http.post("/v1/send", headers={"Authorization": f"Bearer {token}"}, json={
            "agent_id": other["id"], "to": "bob@partner.test", "from": "a2@agents.test", "subject": "s"})
        assert r.json() == {"status": "blocked", "reason": "from must be the agent's own address"}
    async with OperatorClient(service, OPERATOR) as op:
        killed_a2 = await op.kill_agent("a2")
        assert killed_a2 is not None
        assert [a["status"] for a in await op.list_agents()] == ["ACTIVE", "KILLED"]
        killed = await op.kill_agent("a1")
        assert killed is not None and killed["status"] == "KILLED"
        assert await op.kill_agent("nobody") is None
    async with EnforcerClient(service, token) as client:
        d = await client.send({"to": "bob@partner.test", "from": "a1@agents.test", "subject": "s"})
        assert (d.status, d.reason) == ("blocked", "killed")
    assert sink.messages == []


async def test_unix_socket_and_unreachable_service(enforcer: Enforcer, tmp_path: Path, sink: Sink) -> None:
    import pytest

    from envelopay.errors import TransportError

    path = str(tmp_path / "enf.sock")
    runner, where = await start_server(enforcer, path=path)
    try:
        _, token = await enforcer.create_agent("u1", "u1@agents.test", allow=("partner.test",))
        async with EnforcerClient(where, token) as client:
            d = await client.send({"to": "bob@partner.test", "from": "u1@agents.test", "subject": "s"})
            assert d.status == "sent"
            assert (await client.status(d.id or "")).state == "sent"
    finally:
        await runner.cleanup()
    async with EnforcerClient(path, "t") as client:
        with pytest.raises(TransportError):
            await client.send({"to": "bob@partner.test"})
