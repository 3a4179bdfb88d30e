"""The console's activity page: sends and payments in every state, newest first,
filtered by agent and paged (headless Chromium, real clicks; SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.service.console import ACTIVITY_PAGE
from envelopay.enforcer.spend.policy import SpendLimit

from .cdp import chromium
from .conftest import Clock
from .paykit import USDC, Kit, pay_req, payee_wallet
from .test_console_approvals import _login, paid_service  # noqa: F401  (fixture)


async def test_activity_filters_by_agent_and_pages(
    paid_service: tuple[str, Kit], clock: Clock  # noqa: F811
) -> None:
    url, kit = paid_service
    enforcer = kit.enforcer
    _, alpha = await enforcer.create_agent("alpha", "alpha@agents.test", allow=("partner.test",), hourly=100)
    _, beta = await enforcer.create_agent("beta", "beta@agents.test")
    sent = []
    for n in range(ACTIVITY_PAGE + 3):  # one page and three more, one second apart
        clock.now += 1
        mail = {"from": "alpha@agents.test", "to": "x@partner.test", "subject": f"s{n}"}
        d = await enforcer.send(alpha, mail)
        assert d.status == "sent", d
        sent.append(d.id)
    clock.now += 1
    held = await enforcer.send(beta, {"from": "beta@agents.test", "to": "y@other.test", "subject": "hers"})
    assert held.approval_id
    await enforcer.reject(held.approval_id, "api")
    token, _ = await kit.agent("buyer", usdc=2 * USDC, limit=SpendLimit(per_payment=1 * USDC, daily=9 * USDC))
    clock.now += 1
    pay = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 5 * USDC))
    assert pay.status == "pending_approval"

    async with chromium() as page:
        await _login(page, url)
        await page.click("#activity")
        ids = "[...document.querySelectorAll('#sends tr[id]')].map(e => e.id)"
        first = await page.js(ids)
        assert len(first) == ACTIVITY_PAGE and first[0] == f"send-{held.approval_id}"  # newest first
        assert "REJECTED" in await page.js(f"document.querySelector('#send-{held.approval_id}').innerText")
        row = await page.js(f"document.querySelector('#payment-{pay.approval_id}').innerText")
        assert "5 USDC on solana-local" in row and "PENDING" in row and "buyer" in row

        await page.type("#agent", "alpha")
        await page.click("#filter")
        first = await page.js(ids)
        assert first == [f"send-{i}" for i in reversed(sent)][:ACTIVITY_PAGE]
        # alpha paid nothing
        assert await page.js("document.querySelectorAll('#payments tr[id]').length") == 0
        await page.click("#older-sends")
        rest = await page.js(ids)
        assert rest == [f"send-{i}" for i in reversed(sent)][ACTIVITY_PAGE:]  # the filter kept, no overlap
        assert await page.js("document.querySelector('#older-sends') === null")
        assert "alpha" in await page.js("document.querySelector('#agent').value")

        await page.goto(f"{url}/console/activity?agent=ghost")
        assert "no agent 'ghost'" in await page.text()
        await page.goto(f"{url}/console/activity?sends_before=garbage")
        assert "not an activity page token" in await page.text()


async def test_activity_pages_walk_an_index_not_a_sort(paid_service: tuple[str, Kit]) -> None:  # noqa: F811
    """The plan for each activity statement (all agents, one agent; sends and payment
    intents) reads an activity index in order: no sort. SQLite's plan as it is; PostgreSQL
    plans small tables as scans whatever the indexes, so its plan is read with sequential
    scans and sorts priced out (what a large table makes it choose)."""
    _, kit = paid_service
    store = kit.enforcer.store
    sent: list[tuple[str, Sequence[Any]]] = []
    fetch = store.fetch

    async def recording(sql: str, params: Sequence[Any]) -> Any:
        sent.append((sql, params))
        return await fetch(sql, params)

    store.fetch = recording  # type: ignore[method-assign]
    for agent_id in (None, "a1"):
        await store.activity(agent_id, 5, (1e9, "x"))
        await kit.payments.store.activity(agent_id, 5, (1e9, "x"))
    store.fetch = fetch  # type: ignore[method-assign]
    activity = [(sql, p) for sql, p in sent if "(created_at, " in sql.replace("s.", "").replace("p.", "")]
    assert len(activity) == 4
    for sql, params in activity:
        if isinstance(store, SqliteStore):
            rows = await store.fetch("EXPLAIN QUERY PLAN " + sql, params)
            plan = " | ".join(str(r["detail"]) for r in rows)
            assert "_activity" in plan and "TEMP B-TREE" not in plan, (sql, plan)
            continue
        batch = await store.transaction(
            [
                ("SET LOCAL enable_seqscan = off", ()),
                ("SET LOCAL enable_sort = off", ()),
                ("EXPLAIN " + sql, params),
            ]
        )
        plan = " | ".join(str(r[0]) for r in batch.rows[2])
        assert "_activity" in plan and "Sort" not in plan.replace("Sort Key", ""), (sql, plan)
