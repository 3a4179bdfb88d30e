"""The console shows what an approval would let leave, and binds the decision to it:
headless Chromium with real clicks, the operator API, both stores."""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._chromium import Page, chromium

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy

from .conftest import OPERATOR, Sink
from .paykit import CHAIN, USDC, Kit, make_kit, pay_req, payee_wallet

BODY = "Hello Dana,\n\nWe would like to buy your customer list.\nOur offer: 40 000 EUR.\n\n-- sdr"
SUBJECT = "Customer list — an offer"
THREAD = "<invoice-77@rival.example>"
AUTH = {"Authorization": f"Bearer {OPERATOR}"}


@pytest.fixture
async def paid_service(enforcer: Enforcer) -> AsyncIterator[tuple[str, Kit]]:
    kit = await make_kit(enforcer)
    runner, url = await start_server(enforcer, payments=kit.payments)
    yield url, kit
    await runner.cleanup()


async def _held_mail(enforcer: Enforcer, token: str, to: str = "ceo@rival.example") -> str:
    d = await enforcer.send(token, {"from": "sdr@agents.test", "to": to, "subject": SUBJECT,
                                    "text": BODY, "in_reply_to": THREAD})
    assert d.status == "pending_approval" and d.approval_id, d
    return d.approval_id


async def _login(page: Page, url: str) -> None:
    await page.goto(f"{url}/console")
    await page.type("#token", OPERATOR)
    await page.click("#login")


async def _row_text(page: Page, ident: str) -> str:
    return str(await page.js(f"document.querySelector('#row-{ident}')?.innerText ?? ''"))


async def _screenshot_row(page: Page, ident: str, out: Path) -> dict[str, float]:
    """A PNG of the approval row as it is rendered; returns its box."""
    box = await page.js(
        f"(() => {{ const r = document.querySelector('#row-{ident}').getBoundingClientRect();"
        " return {x: r.x + scrollX, y: r.y + scrollY, width: r.width, height: r.height}; })()"
    )
    shot = await page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                           clip={**box, "scale": 1})
    out.write_bytes(base64.b64decode(shot["data"]))
    return dict(box)


async def test_a_held_mail_shows_what_would_leave_in_the_page_the_api_and_a_screenshot(
    enforcer: Enforcer, service: str, tmp_path: Path
) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    held = await _held_mail(enforcer, token)

    async with httpx.AsyncClient(base_url=service, headers=AUTH) as http:
        listed = (await http.get("/v1/approvals")).json()["approvals"]
        one = (await http.get(f"/v1/approvals/{held}")).json()
        assert (await http.get("/v1/approvals/nope")).status_code == 404
    assert listed[0]["subject"] == SUBJECT and listed[0]["content"]["text"] == BODY
    assert one["content_hash"] == listed[0]["content_hash"] and one["content_hash"].startswith("sha256:")
    content = one["content"]
    assert (content["from"], content["to"], content["subject"], content["in_reply_to"]) == (
        "sdr@agents.test", "ceo@rival.example", SUBJECT, THREAD)
    assert content["text"] == BODY and content["attachments"] == []

    async with chromium() as page:
        await page.call("Emulation.setDeviceMetricsOverride", width=1000, height=700,
                        deviceScaleFactor=1, mobile=False)
        await _login(page, service)
        row = await _row_text(page, held)
        # The row itself carries the subject and every line of the body, as they leave.
        assert SUBJECT in row and "We would like to buy your customer list." in row, row
        assert "Our offer: 40 000 EUR." in row and THREAD in row and "ceo@rival.example" in row
        shot = tmp_path / "console-approvals.png"
        box = await _screenshot_row(page, held, shot)
        # The subject and body elements are drawn inside the row that the PNG holds.
        for sel in (".subject", "pre.body"):
            inner = await page.js(
                f"(() => {{ const r = document.querySelector('#row-{held} {sel}').getBoundingClientRect();"
                " return {y: r.y + scrollY, h: r.height}; })()")
            assert inner["h"] > 0 and box["y"] <= inner["y"]
            assert inner["y"] + inner["h"] <= box["y"] + box["height"]
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 2000
        if os.environ.get("ENVELOPAY_SCREENSHOTS"):  # to refresh docs/console-approvals.png
            Path(os.environ["ENVELOPAY_SCREENSHOTS"]).write_bytes(shot.read_bytes())

        await page.click(f"#row-{held} a")  # the detail page
        detail = await page.text()
        assert SUBJECT in detail and "Our offer: 40 000 EUR." in detail and one["content_hash"] in detail


async def test_a_decision_with_a_stale_hash_is_a_conflict_and_nothing_leaves(
    enforcer: Enforcer, service: str, sink: Sink
) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    held = await _held_mail(enforcer, token)
    async with httpx.AsyncClient(base_url=service, headers=AUTH) as http:
        shown = (await http.get(f"/v1/approvals/{held}")).json()["content_hash"]
        stale = "sha256:" + "0" * 64
        r = await http.post(f"/v1/approvals/{held}/approve", json={"content_hash": stale})
        assert r.status_code == 409 and r.json()["detail"].startswith("content_changed"), r.text
        assert r.json()["state"] == "PENDING" and sink.messages == []
        r = await http.post(f"/v1/approvals/{held}/approve", json={"content_hash": 5})
        assert r.status_code == 400 and sink.messages == []
        r = await http.post(f"/v1/approvals/{held}/approve", json={"content_hash": shown})
        assert r.status_code == 200 and r.json()["state"] == "SENT"
    assert len(sink.messages) == 1
    assert BODY.splitlines()[2].encode() in sink.messages[0][2]


async def _short_payment(kit: Kit) -> tuple[str, str]:
    """(approval id, payer address) of a 5 USDC payment held (over the 1 USDC per-payment
    limit) from a wallet that holds 2 USDC."""
    token, address = await kit.agent(
        usdc=2 * USDC, limit=SpendLimit(per_payment=1 * USDC, hourly=50 * USDC, daily=20 * USDC))
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 5 * USDC))
    assert d.status == "pending_approval" and d.approval_id, d
    return d.approval_id, address


async def test_the_operator_sees_the_shortfall_before_clicking_approve(
    paid_service: tuple[str, Kit]
) -> None:
    url, kit = paid_service
    held, address = await _short_payment(kit)
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        view: dict[str, Any] = (await http.get(f"/v1/approvals/{held}")).json()
    assert view["balance"]["amount"] == str(2 * USDC)
    assert view["balance"]["shortfall"]["human"] == "3 USDC (3000000 units)"
    assert view["content"]["amount_text"] == "5 USDC (5000000 units)"
    assert [c["remaining"] for c in view["caps"]] == [str(50 * USDC), str(20 * USDC)]
    assert view["policy"]["limit"]["per_payment"]["human"] == "1 USDC (1000000 units)"

    async with chromium() as page:
        await _login(page, url)
        row = await _row_text(page, held)
        assert "5 USDC (5000000 smallest units)" in row and "Short by 3 USDC (3000000 units)" in row, row
        assert "left today: 20 USDC" in row and "per_payment 1 USDC" in row
        assert await page.js(f"getComputedStyle(document.querySelector('#row-{held} .shortfall')).color") \
            == "rgb(170, 0, 0)"  # drawn in red, beside the button
        await page.click(f"#approve-{held}")
        msg = await page.text()
        assert f"approve {held}: FAILED" in msg and "insufficient" in msg.lower(), msg
    assert kit.payment_txs(address) == [] and kit.usdc_of(address) == 2 * USDC


async def test_a_stale_click_is_refused_when_the_policy_changed_after_the_page_was_shown(
    paid_service: tuple[str, Kit]
) -> None:
    url, kit = paid_service
    held, address = await _short_payment(kit)
    kit.chain.mint_tokens(address, "USDC", 10 * USDC)  # enough now: only the binding refuses
    async with chromium() as page:
        await _login(page, url)
        assert "per_payment 1 USDC" in await _row_text(page, held)
        # While the page is open, the policy the operator judged by changes.
        policy = SpendPolicy(limits={f"{CHAIN}/USDC": SpendLimit(per_payment=1 * USDC, daily=100 * USDC)},
                             payees=("partner.test",))
        assert await kit.payments.set_policy("buyer", policy)
        await page.click(f"#approve-{held}")
        msg = await page.text()
        assert f"approve {held} refused: content_changed" in msg, msg
        assert "PENDING" in await _row_text(page, held)
        assert kit.payment_txs(address) == []
        # The fresh page shows the new policy; its click goes through.
        assert "daily 100 USDC" in await _row_text(page, held)
        await page.click(f"#approve-{held}")
        assert f"approve {held}: SENT" in await page.text() or kit.payment_txs(address)
    assert len(kit.payment_txs(address)) == 1
    # Decided: no balance, caps or shortfall any more (the wallet has moved on).
    async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
        view = (await http.get(f"/v1/approvals/{held}")).json()
    assert view["state"] != "PENDING" and view["balance"] is None and view["caps"] == []


async def test_new_approvals_appear_without_a_reload(enforcer: Enforcer, service: str) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    first = await _held_mail(enforcer, token)
    async with chromium() as page:
        await _login(page, service)
        loads = page.loads
        assert SUBJECT in await _row_text(page, first)
        second = await _held_mail(enforcer, token, to="cfo@rival.example")
        await enforcer.reject(first, "api")
        for _ in range(300):  # live.js polls every 2 s; bounded wait, no timing asserted
            shown = await _row_text(page, second), await _row_text(page, first)
            if "cfo@rival.example" in shown[0] and "REJECTED" in shown[1]:
                break
            await asyncio.sleep(0.1)
        assert "cfo@rival.example" in await _row_text(page, second)
        assert "REJECTED" in await _row_text(page, first)
        assert page.loads == loads  # no navigation happened
        # The swapped-in rows keep working buttons.
        await page.click(f"#reject-{second}")
        assert "REJECTED" in await _row_text(page, second)


async def test_a_held_protocol_mail_shows_its_note_and_attachment_sizes(
    enforcer: Enforcer, service: str
) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    note = "We would like to buy"
    d = await enforcer.send(token, {"from": "sdr@agents.test", "to": "ceo@rival.example", "type": "which",
                                    "subject": "menu", "body": {"v": "0.1.0", "note": note}})
    assert d.approval_id
    async with httpx.AsyncClient(base_url=service, headers=AUTH) as http:
        view = (await http.get(f"/v1/approvals/{d.approval_id}")).json()
    content = view["content"]
    assert content["note"] == "We would like to buy" and content["subject"].startswith("WHICH")
    [json_part] = content["attachments"]
    assert json_part["name"] == "envelopay.json" and json_part["content_type"] == "application/json"
    assert json_part["size"] > 0 and '"note": "We would like to buy"' in content["text"]
    async with httpx.AsyncClient(base_url=service) as web:
        await web.post("/console/login", data={"token": OPERATOR})
        page = (await web.get(f"/console/approvals/{d.approval_id}")).text
    assert f"envelopay.json (application/json, {json_part['size']} bytes)" in page
    assert "We would like to buy" in page


async def test_a_poll_that_finds_nothing_changed_builds_nothing(enforcer: Enforcer, service: str) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    first = await _held_mail(enforcer, token)
    async with httpx.AsyncClient(base_url=service) as web:
        assert (await web.get("/console/live.json")).status_code == 403  # no session
        await web.post("/console/login", data={"token": OPERATOR})
        full = (await web.get("/console/live.json")).json()
        assert f"row-{first}" in full["html"] and SUBJECT in full["html"]
        same = (await web.get("/console/live.json", params={"version": full["version"]})).json()
        assert same == {"version": full["version"]}
        await enforcer.reject(first, "api")
        changed = (await web.get("/console/live.json", params={"version": full["version"]})).json()
        assert changed["version"] != full["version"] and "REJECTED" in changed["html"]


async def test_what_an_agent_writes_is_shown_as_text_never_as_markup(
    enforcer: Enforcer, service: str
) -> None:
    _, token = await enforcer.create_agent("sdr", "sdr@agents.test")
    evil = "<img src=x onerror=alert(1)></pre><script>alert(2)</script>"
    d = await enforcer.send(token, {"from": "sdr@agents.test", "to": "ceo@rival.example",
                                    "subject": "hi <b>boss</b>", "text": evil})
    assert d.approval_id
    async with chromium() as page:
        await _login(page, service)
        row = await _row_text(page, d.approval_id)
        assert evil in row and "hi <b>boss</b>" in row  # the characters, as text
        row_id = f"#row-{d.approval_id}"
        found = f"document.querySelectorAll('{row_id} img, {row_id} script, {row_id} b.subject b').length"
        assert await page.js(found) == 0
