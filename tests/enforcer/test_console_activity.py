"""The console's activity page: sends and payments in every state, and the requests
refused outright, newest first, filtered by agent and paged (headless Chromium, real
clicks; SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests._chromium import chromium

from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.service.console import ACTIVITY_PAGE
from envelopay.enforcer.spend.policy import SpendLimit

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
    """The plan for each activity statement (all agents, one agent; sends, payment
    intents and refused requests) reads an activity index in order: no sort. SQLite's
    plan as it is; PostgreSQL plans small tables as scans whatever the indexes, so its
    plan is read with sequential scans and sorts priced out (what a large table makes it
    choose)."""
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
        await store.refusals(agent_id, 5, (1e9, "x"))
    store.fetch = fetch  # type: ignore[method-assign]
    plain = [(sql.replace("s.", "").replace("p.", "").replace("r.", ""), p) for sql, p in sent]
    activity = [(sql, p) for (sql, p), (bare, _) in zip(sent, plain, strict=True) if "(created_at, " in bare]
    assert len(activity) == 6
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


async def test_refused_requests_are_kept_and_shown_by_agent_and_paged(
    paid_service: tuple[str, Kit], clock: Clock  # noqa: F811
) -> None:
    """Issue 30: a request refused outright (mail or payment) is on the activity page with
    its reason, filtered by agent and paged; an unknown token's is no agent's and is not kept."""
    url, kit = paid_service
    enforcer = kit.enforcer
    _, alpha = await enforcer.create_agent("alpha", "alpha@agents.test", allow=("partner.test",))
    beta_agent, beta = await enforcer.create_agent("beta", "beta@agents.test")
    for n in range(ACTIVITY_PAGE + 2):  # a page and two more of alpha's, one second apart
        clock.now += 1
        mail = {"from": "ceo@agents.test", "to": "x@partner.test", "subject": f"forged {n}"}
        d = await enforcer.send(alpha, mail)
        assert d.status == "blocked" and d.reason == "from must be the agent's own address", d
    clock.now += 1
    assert (await enforcer.send(beta, {"to": "not an address", "text": "hi"})).status == "blocked"
    ask = {"from": "a@b.test", "to": "x@partner.test", "subject": "hi"}
    unknown = await enforcer.send("no-such-token", ask)
    assert unknown.status == "blocked" and unknown.reason == "unknown agent"
    token, _ = await kit.agent("buyer", usdc=2 * USDC, limit=SpendLimit(per_payment=1 * USDC, daily=9 * USDC))
    clock.now += 1
    bad = await kit.payments.submit("pay", token, {**pay_req(payee_wallet(), 5 * USDC), "amount": "-3"})
    assert bad.status == "blocked" and bad.code == "invalid_request", bad
    clock.now += 1
    await enforcer.kill_agent("beta")
    late = await enforcer.send(beta, {"from": "beta@agents.test", "to": "y@x.test", "subject": "hi"})
    assert late.code == "killed"

    everyone = await enforcer.store.refusals(None, 100)
    assert len(everyone) == ACTIVITY_PAGE + 5  # alpha's, beta's two, buyer's one; not the unknown token's
    alphas = [r.id for r in everyone if r.agent_name == "alpha"]
    assert len(alphas) == ACTIVITY_PAGE + 2
    assert [r.code for r in everyone[:2]] == ["killed", "invalid_request"] and everyone[1].side == "spend"
    assert beta_agent.id in {r.agent_id for r in everyone}

    async with chromium() as page:
        await _login(page, url)
        await page.click("#activity")
        ids = "[...document.querySelectorAll('#refused tr[id]')].map(e => e.id)"
        first = await page.js(ids)
        assert first == [f"refused-{r.id}" for r in everyone][:ACTIVITY_PAGE]  # newest first
        killed = await page.js(f"document.querySelector('#refused-{everyone[0].id}').innerText")
        assert "beta" in killed and "killed" in killed and "send: send" in killed, killed
        paid = await page.js(f"document.querySelector('#refused-{everyone[1].id}').innerText")
        assert "buyer" in paid and "spend: pay" in paid and "amount" in paid, paid
        assert "-3 USDC on solana-local — to seller@partner.test" in paid, paid

        await page.type("#agent", "alpha")
        await page.click("#filter")
        assert await page.js(ids) == [f"refused-{i}" for i in alphas][:ACTIVITY_PAGE]
        row = await page.js(f"document.querySelector('#refused-{alphas[0]}').innerText")
        assert "from must be the agent's own address" in row and "forged" in row and "x@partner.test" in row
        await page.click("#older-refused")
        assert await page.js(ids) == [f"refused-{i}" for i in alphas][ACTIVITY_PAGE:]  # the filter kept
        assert await page.js("document.querySelector('#older-refused') === null")
        assert await page.js("document.querySelectorAll('#sends tr[id]').length") == 0  # alpha sent nothing

        await page.goto(f"{url}/console/activity?refused_before=garbage")
        assert "not an activity page token" in await page.text()
