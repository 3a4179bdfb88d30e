"""Pages of agents and of the approval queue (pending first) in the store, the operator
API, its client and the console, on both stores."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from envelopay.enforcer.client.http_client import OperatorClient
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.errors import UsageError

from .conftest import OPERATOR, Clock, Sink


def req(frm: str, subject: str) -> dict[str, Any]:
    return {"to": "x@other.test", "from": frm, "subject": subject, "text": "x"}


async def _queue(enforcer: Enforcer, clock: Clock) -> list[str]:
    """9 queue rows: 3 rejected, 2 sent (approved), 4 pending, plus direct sends the queue
    never shows. Returns their ids in queue order."""
    _, tok = await enforcer.create_agent("q", "q@agents.test", allow=("partner.test",), hourly=100, daily=100)
    ids: dict[str, list[str]] = {"PENDING": [], "SENT": [], "REJECTED": []}
    for i in range(9):
        clock.now += 1
        d = await enforcer.send(tok, req("q@agents.test", f"s{i}"))
        assert d.approval_id
        if i < 3:
            await enforcer.reject(d.approval_id)
            ids["REJECTED"].append(d.approval_id)
        elif i < 5:
            assert (await enforcer.approve(d.approval_id)).ok
            ids["SENT"].append(d.approval_id)
        else:
            ids["PENDING"].append(d.approval_id)
    for i in range(5):  # direct sends (allowlisted): SENT rows outside the queue view
        clock.now += 1
        direct = {**req("q@agents.test", f"d{i}"), "to": "b@partner.test"}
        assert (await enforcer.send(tok, direct)).status == "sent"
    return [i for state in ("PENDING", "REJECTED", "SENT") for i in reversed(ids[state])]


async def test_store_pages_agents_and_the_queue(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    for name in ("e", "b", "g", "a", "f", "c", "d"):
        await enforcer.create_agent(name, f"{name}@agents.test")
    names: list[str] = []
    after = None
    while True:
        page, after = await enforcer.agents_page(3, after)
        assert len(page) <= 3
        names += [a.name for a in page]
        if after is None:
            break
    assert names == ["a", "b", "c", "d", "e", "f", "g"]

    expected = await _queue(enforcer, clock)
    assert [r.id for r in await enforcer.list_approvals()] == expected
    got: list[str] = []
    token = None
    pages = 0
    while True:
        rows, token = await enforcer.approvals_page(2, token)
        got += [r.id for r in rows]
        pages += 1
        if token is None:
            break
    assert got == expected and pages == 5
    with pytest.raises(UsageError, match="not a queue page token"):
        await enforcer.approvals_page(2, "PENDING:nope:x")


async def test_api_client_and_console_page(
    enforcer: Enforcer, service: str, clock: Clock, sink: Sink
) -> None:
    expected = await _queue(enforcer, clock)
    async with OperatorClient(service, OPERATOR) as op:
        first, token = await op.approvals_page(4)
        assert [r["id"] for r in first] == expected[:4] and token is not None
        assert {r["state"] for r in first} == {"PENDING"}
        rest, end = await op.approvals_page(100, token)
        assert [r["id"] for r in rest] == expected[4:] and end is None
        agents, nxt = await op.agents_page(1)
        assert [a["name"] for a in agents] == ["q"] and nxt is None
        with pytest.raises(UsageError, match="limit must be"):
            await op.approvals_page(0)
        with pytest.raises(UsageError, match="not a queue page token"):
            await op.approvals_page(5, "garbage")
    # str.isdigit() is true of '²' and '٣' (int() refuses the first) and of 5,000 nines
    # (past int()'s digit limit): each is a 400 with the rule, never a 500.
    async with httpx.AsyncClient(base_url=service, headers={"Authorization": f"Bearer {OPERATOR}"}) as raw:
        for bad in ("²", "٣", "9" * 5000, "-1", "1.5", "0", "501"):
            for path in ("/v1/agents", "/v1/approvals"):
                r = await raw.get(path, params={"limit": bad})
                assert r.status_code == 400 and "limit must be" in r.json()["error"], (path, bad[:9], r.text)

    for i in range(60):
        await enforcer.create_agent(f"z{i:02d}", f"z{i:02d}@agents.test")
    async with httpx.AsyncClient(base_url=service, follow_redirects=True) as web:
        page = (await web.post("/console/login", data={"token": OPERATOR})).text
        assert page.count("<tr id='agent-") == 50 and "id='more-agents'" in page
        assert "id='more-queue'" not in page  # 9 rows fit one page
        link = re.search(r"id='more-agents' href='([^']+)'", page)
        assert link
        second = (await web.get(link.group(1).replace("&amp;", "&"))).text
        assert second.count("<tr id='agent-") == 11 and "id='more-agents'" not in second
        assert "agent-z59" in second and "agent-q" not in second
