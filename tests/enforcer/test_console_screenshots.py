"""Screenshots of the operator console that README shows (issue 30's Done-when: the
approval content, the live update and the activity views), each taken in headless
Chromium after real clicks, each failing when what it shows is not drawn in it.
ENVELOPAY_CONSOLE_SHOTS=DIR writes them there (docs/ to refresh README's)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests._chromium import Page, chromium

from .paykit import Kit
from .test_console_approvals import (  # noqa: F401  (fixture)
    SUBJECT,
    _held_mail,
    _login,
    _short_payment,
    paid_service,
)


async def _drawn(page: Page, out: Path, selectors: list[str]) -> None:
    """A whole-page PNG in which each of `selectors` is drawn (Page.drawn), kept in
    $ENVELOPAY_CONSOLE_SHOTS when asked (docs/ to refresh README's)."""
    await page.drawn(out, selectors, width=1100)
    if os.environ.get("ENVELOPAY_CONSOLE_SHOTS"):
        shutil.copyfile(out, Path(os.environ["ENVELOPAY_CONSOLE_SHOTS"]) / out.name)


async def test_screenshots_of_the_live_queue_and_the_activity_page(
    paid_service: tuple[str, Kit], tmp_path: Path  # noqa: F811
) -> None:
    url, kit = paid_service
    enforcer = kit.enforcer
    _, alpha = await enforcer.create_agent("alpha", "alpha@agents.test", allow=("partner.test",), hourly=100)
    _, sdr = await enforcer.create_agent("sdr", "sdr@agents.test")
    for n in range(3):
        sent = await enforcer.send(alpha, {"from": "alpha@agents.test", "to": "x@partner.test",
                                           "subject": f"weekly report {n + 1}"})
        assert sent.status == "sent", sent
    forged = await enforcer.send(alpha, {"from": "ceo@agents.test", "to": "x@partner.test", "subject": "hi"})
    assert forged.status == "blocked", forged  # refused outright: under Refused
    rejected = await _held_mail(enforcer, sdr, to="cfo@rival.example")
    await enforcer.reject(rejected, "api")
    short, _ = await _short_payment(kit)

    async with chromium() as page:
        await _login(page, url)
        loads = page.loads
        # Live: a mail held while the page is open appears in the queue without a reload.
        held = await _held_mail(enforcer, sdr)
        await page.until(f"!!document.querySelector('#row-{held} .subject')", "the new approval")
        assert page.loads == loads
        assert SUBJECT in await page.js(f"document.querySelector('#row-{held}').innerText")
        await _drawn(page, tmp_path / "console-live.png", [f"#row-{held} .subject", f"#row-{held} pre.body",
                                                           f"#row-{short} .shortfall"])

        await page.click("#activity")
        sends = await page.js("[...document.querySelectorAll('#sends tr[id]')].map(e => e.innerText)")
        assert len(sends) == 5 and any("REJECTED" in s for s in sends), sends
        payment = await page.js(f"document.querySelector('#payment-{short}').innerText")
        assert "5 USDC on solana-local" in payment and "PENDING" in payment, payment
        assert payment.count("over_payment_max") == 1, payment  # the code once, not before its reason too
        assert "smallest units of USDC" in payment, payment
        await _drawn(page, tmp_path / "console-activity.png",
                     ["#sends", f"#send-{rejected}", f"#payment-{short}", "#refused tr[id]"])
        refused = await page.js("document.querySelector('#refused').innerText")
        assert "from must be the agent's own address" in refused, refused
