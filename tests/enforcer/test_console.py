"""The operator web console in headless Chromium, with real clicks."""

from __future__ import annotations

import httpx
from tests._chromium import chromium

from envelopay.enforcer.send.enforcer import Enforcer

from .conftest import OPERATOR, Sink


def req(frm: str, to: str, subject: str) -> dict[str, str]:
    return {"to": to, "from": frm, "subject": subject, "text": "x"}


async def test_console_approve_reject_kill_with_real_clicks(
    enforcer: Enforcer, service: str, sink: Sink
) -> None:
    _, t1 = await enforcer.create_agent(
        "alpha", "alpha@agents.test", allow=("a@partner.test", "b@partner.test", "friends.test")
    )
    _, t2 = await enforcer.create_agent("beta", "beta@agents.test")
    old = await enforcer.send(t1, req("alpha@agents.test", "z@other.test", "old"))
    assert old.approval_id
    await enforcer.reject(old.approval_id)
    p1 = (await enforcer.send(t1, req("alpha@agents.test", "x@other.test", "first"))).approval_id
    p2 = (await enforcer.send(t1, req("alpha@agents.test", "y@other.test", "second"))).approval_id
    p3 = (await enforcer.send(t2, req("beta@agents.test", "w@other.test", "third"))).approval_id
    assert p1 and p2 and p3

    async with chromium() as page:
        await page.goto(f"{service}/console")
        assert "Operator token" in await page.text()
        await page.type("#token", "wrong")
        await page.click("#login")
        assert "Wrong operator token" in await page.text()

        await page.goto(f"{service}/console")
        await page.type("#token", OPERATOR)
        await page.click("#login")
        text = await page.text()
        assert "alpha@agents.test" in text and "20/hr · 100/day · 3 allowlisted" in text
        assert "20/hr · 100/day · 0 allowlisted" in text
        cells = "[...document.querySelectorAll('#queue td:nth-child(3)')]"
        states = await page.js(f"{cells}.map(e => e.innerText)")
        assert states == ["PENDING", "PENDING", "PENDING", "REJECTED"]  # pending first
        assert await page.js(f"document.querySelector('#row-{old.approval_id} button') === null")

        await page.click(f"#approve-{p1}")
        assert await page.js(f"document.querySelector('#row-{p1} td:nth-child(3)').innerText") == "SENT"
        assert len(sink.messages) == 1

        await page.click(f"#reject-{p2}")
        assert await page.js(f"document.querySelector('#row-{p2} td:nth-child(3)').innerText") == "REJECTED"

        await page.click("#kill-beta")
        assert await page.js("document.querySelector('#agent-beta td:nth-child(3)').innerText") == "KILLED"
        assert await page.js("document.querySelector('#kill-beta') === null")
        # Kill beats approval: beta's pending send cannot be approved.
        await page.click(f"#approve-{p3}")
        assert "agent is killed" in await page.text()
        assert await page.js(f"document.querySelector('#row-{p3} td:nth-child(3)').innerText") == "PENDING"
        assert len(sink.messages) == 1

        await page.click("#logout")
        assert "Operator token" in await page.text()

    # Without a session (or with an agent token) the console refuses actions.
    async with httpx.AsyncClient(base_url=service) as http:
        r = await http.post(f"/console/approve/{p3}", data={"csrf": "x"})
        assert r.status_code == 403
        r = await http.get("/console", headers={"Authorization": f"Bearer {t1}"})
        assert "Operator token" in r.text
