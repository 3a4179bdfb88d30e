"""The spend enforcer on both stores, paying on a LiteSVM chain and mailing a real aiosmtpd
sink: pay-then-send, every refusal of the ordered checks, idempotent retries, approvals."""

from __future__ import annotations

import asyncio
from typing import Any

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.payments_exec import approve, reject
from envelopay.enforcer.spend.policy import SpendLimit
from envelopay.protocol.parse import parse

from .conftest import Sink
from .paykit import CHAIN, USDC, make_kit, pay_req, payee_wallet, proof_tx


async def test_allowed_payment_pays_then_sends_the_pay_with_its_proof(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent()
    to = payee_wallet()
    d = await kit.payments.submit("pay", token, pay_req(to, 2 * USDC, note="for the report"))
    assert d.status == "paid_and_sent", d
    assert d.tx_id and d.message_id and d.id
    assert kit.usdc_of(to) == 2 * USDC and kit.usdc_of(address) == 98 * USDC
    assert kit.payment_txs(address) == [d.tx_id]
    assert len(sink.messages) == 1
    parsed = parse(sink.messages[0][2])
    assert parsed.valid and parsed.message_id == d.message_id
    body = parsed.body or {}
    assert body["type"] == "pay" and proof_tx(body["proof"]) == d.tx_id and body["amount"] == str(2 * USDC)
    assert body["note"] == "for the report"
    # A retried call returns the first outcome and pays nothing more.
    again = await kit.payments.submit("pay", token, pay_req(to, 2 * USDC, note="for the report"))
    assert (again.status, again.tx_id, again.id) == ("paid_and_sent", d.tx_id, d.id)
    assert kit.payment_txs(address) == [d.tx_id] and len(sink.messages) == 1
    status = await kit.payments.status(token, d.id)
    assert (status.status, status.tx_id, status.message_id) == ("paid_and_sent", d.tx_id, d.message_id)


async def test_every_refusal_moves_nothing(enforcer: Enforcer, store: EnforcerStore, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    limit = SpendLimit(per_payment=5 * USDC, hourly=8 * USDC, daily=12 * USDC)
    token, address = await kit.agent(limit=limit, wallets=())
    to = payee_wallet()

    async def outcome(req: dict[str, Any], kind: str = "pay", tok: str | None = token) -> tuple[str, str]:
        d = await kit.payments.submit(kind, tok, req)
        return d.status, d.code

    assert await outcome(pay_req(to), tok="epa_wrong") == ("blocked", "unknown_agent")
    assert await outcome(pay_req(to, amount=0)) == ("blocked", "invalid_request")
    assert await outcome(pay_req(to, to="a@b.test, c@d.test")) == ("blocked", "invalid_request")
    assert await outcome(pay_req(to, key="")) == ("blocked", "invalid_request")
    # S1: the asset must be in the rail's registry, on a chain a rail pays on here.
    assert await outcome(pay_req(to, token="DOGE")) == ("blocked", "unknown_asset")
    assert await outcome(pay_req(to, chain="solana-mars")) == ("blocked", "unknown_asset")
    assert await outcome(pay_req("not-a-wallet")) == ("blocked", "invalid_request")
    # The mail allowlist and S2: a payee off either list is held, never paid.
    assert await outcome(pay_req(to, to="eve@stranger.test", key="s1")) == (
        "pending_approval",
        "recipient_not_allowed",
    )
    # S3: over the per-payment maximum.
    assert await outcome(pay_req(to, 6 * USDC, key="big")) == ("pending_approval", "over_payment_max")
    # S5: hourly (8) then daily (12): 5 + 3 fit the hour; the next is held on the hour.
    assert (await outcome(pay_req(to, 5 * USDC, key="p1")))[0] == "paid_and_sent"
    assert (await outcome(pay_req(to, 3 * USDC, key="p2")))[0] == "paid_and_sent"
    assert await outcome(pay_req(to, 1 * USDC, key="p3")) == ("pending_approval", "hourly_cap_reached")
    kit.enforcer.clock.now += 3600  # type: ignore[attr-defined]  # the test clock
    assert (await outcome(pay_req(to, 4 * USDC, key="p4")))[0] == "paid_and_sent"
    # 12 spent today: the daily cap refuses and hands the hour's amount back.
    assert await outcome(pay_req(to, 1 * USDC, key="p5")) == ("pending_approval", "daily_cap_reached")
    agent = await store.agent_by_name("buyer")
    assert agent is not None
    hour = __import__("time").strftime("%Y-%m-%dT%H", __import__("time").gmtime(kit.enforcer.clock()))
    assert await kit.payments.store.spent(agent.id, f"{CHAIN}/USDC", "h", hour) == 4 * USDC
    assert await kit.payments.store.spent(agent.id, f"{CHAIN}/USDC", "d", hour[:10]) == 12 * USDC
    assert kit.usdc_of(to) == 12 * USDC and len(kit.payment_txs(address)) == 3
    assert len(sink.messages) == 3
    # Killed: nothing at all, not even a queue row.
    await enforcer.kill_agent("buyer")
    assert await outcome(pay_req(to, key="after-kill")) == ("blocked", "killed")
    assert kit.usdc_of(to) == 12 * USDC


async def test_payee_wallet_allowlist_zero_cap_and_missing_limit_hold(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    good = payee_wallet()
    token, address = await kit.agent(wallets=(good,))
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key="w"))
    assert (d.status, d.code) == ("pending_approval", "wallet_not_allowed") and d.approval_id
    d = await kit.payments.submit("pay", token, pay_req(good, key="payee", to="x@elsewhere.test"))
    assert (d.status, d.code) == ("pending_approval", "recipient_not_allowed")
    tok2, _ = await kit.agent("zero", limit=SpendLimit(hourly=0, daily=10 * USDC))
    d = await kit.payments.submit("pay", tok2, pay_req(payee_wallet(), key="z"))
    assert (d.status, d.code) == ("pending_approval", "hourly_cap_zero")
    agent = await enforcer.store.agent_by_name("zero")
    assert agent is not None
    # Zero holds before any counter is touched: not even the mail slot stays taken.
    day = __import__("time").strftime("%Y-%m-%d", __import__("time").gmtime(enforcer.clock()))
    assert await kit.payments.store.spent(agent.id, f"{CHAIN}/USDC", "d", day) == 0
    assert await enforcer.store.counter(agent.id, "d", day) == 0
    tok3, _ = await kit.agent("nolimit")
    await kit.payments.set_policy(
        "nolimit",
        __import__("envelopay.enforcer.spend.policy").enforcer.spend.policy.SpendPolicy(payees=("partner.test",)),
    )
    d = await kit.payments.submit("pay", tok3, pay_req(payee_wallet(), key="n"))
    assert (d.status, d.code) == ("pending_approval", "no_spend_limit")
    assert kit.payment_txs(address) == []


async def test_require_invoice_blocks_a_plain_pay(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    token, _ = await kit.agent(require_invoice=True)
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet()))
    assert (d.status, d.code) == ("blocked", "invoice_required")


async def test_insufficient_funds_fails_and_hands_the_caps_back(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(usdc=1 * USDC)
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 3 * USDC))
    assert (d.status, d.code) == ("failed", "insufficient_funds") and d.tx_id is None
    agent = await enforcer.store.agent_by_name("buyer")
    assert agent is not None
    day = __import__("time").strftime("%Y-%m-%d", __import__("time").gmtime(enforcer.clock()))
    assert await kit.payments.store.spent(agent.id, f"{CHAIN}/USDC", "d", day) == 0
    assert await enforcer.store.counter(agent.id, "d", day) == 0
    assert sink.messages == [] and kit.payment_txs(address) == []
    # A retry with the same key returns the first outcome.
    again = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 3 * USDC))
    assert (again.status, again.id) == ("failed", d.id)


async def test_approval_pays_once_reject_blocks_and_kill_beats_approval(
    enforcer: Enforcer, sink: Sink
) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(payees=())
    to = payee_wallet()
    held = await kit.payments.submit("pay", token, pay_req(to, key="a"))
    assert held.status == "pending_approval" and held.approval_id
    rows = {r.id: r.to_json() for r in await kit.payments.store.queue()}
    row = rows[held.approval_id]
    assert row["amount"] == str(USDC) and row["amount_human"] == "1" and row["asset"] == f"{CHAIN}/USDC"
    assert (
        row["payee"] == "seller@partner.test" and row["wallet"] == to and row["code"] == "payee_not_allowed"
    )
    first = await approve(kit.payments, held.approval_id)
    assert first.ok and first.disposition and first.disposition.status == "paid_and_sent"
    second = await approve(kit.payments, held.approval_id)
    assert (second.ok, second.state, second.detail) == (False, "SENT", "not pending")
    assert len(kit.payment_txs(address)) == 1 and kit.usdc_of(to) == USDC and len(sink.messages) == 1
    status = await kit.payments.status(token, held.approval_id)
    assert status.status == "paid_and_sent" and status.tx_id == first.disposition.tx_id

    r = await kit.payments.submit("pay", token, pay_req(to, key="r"))
    assert r.approval_id
    rej = await reject(kit.payments, r.approval_id)
    assert rej.ok and (await kit.payments.status(token, r.approval_id)).status == "blocked"
    assert not (await approve(kit.payments, r.approval_id)).ok

    k = await kit.payments.submit("pay", token, pay_req(to, key="k"))
    assert k.approval_id
    await enforcer.kill_agent("buyer")
    d = await approve(kit.payments, k.approval_id)
    assert (d.ok, d.detail) == (False, "agent is killed: approval refused")
    assert len(kit.payment_txs(address)) == 1


async def test_balances_show_only_the_agents_own_wallets(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(usdc=7 * USDC)
    await kit.agent("other")
    b = await kit.payments.balances(token)
    assert b["agent"] == "buyer" and [w["address"] for w in b["wallets"]] == [address]
    assert b["wallets"][0]["balances"]["USDC"] == {"amount": str(7 * USDC), "human": "7"}
    assert (await kit.payments.balances("epa_nope"))["wallets"] == []


async def test_64_concurrent_payments_against_a_20_usdc_daily_cap(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    limit = SpendLimit(per_payment=5 * USDC, hourly=100 * USDC, daily=20 * USDC)
    token, address = await kit.agent(usdc=100 * USDC, limit=limit)
    to = payee_wallet()
    results = await asyncio.gather(
        *(kit.payments.submit("pay", token, pay_req(to, USDC, key=f"c{n}")) for n in range(64))
    )
    statuses = [d.status for d in results]
    assert statuses.count("paid_and_sent") == 20 and statuses.count("pending_approval") == 44
    assert {d.code for d in results if d.status == "pending_approval"} == {"daily_cap_reached"}
    assert kit.usdc_of(to) == 20 * USDC and kit.usdc_of(address) == 80 * USDC
    assert len(kit.payment_txs(address)) == 20 and len(sink.messages) == 20


async def test_16_concurrent_approvals_of_one_held_payment_make_one_transaction(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(payees=())
    held = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key="held"))
    assert held.approval_id
    decisions = await asyncio.gather(*(approve(kit.payments, held.approval_id, f"op{n}") for n in range(16)))
    assert sum(d.ok for d in decisions) == 1
    assert len(kit.payment_txs(address)) == 1


async def test_a_kill_racing_an_approval_never_pays_after_the_kill(enforcer: Enforcer) -> None:
    """50 races, the kill landing after a varying number of the approval's statements. The
    payment is committed by the broadcast claim (SIGNED → BROADCAST, before the bytes
    leave): every transaction on the chain belongs to an intent whose claim was already
    visible right after the kill committed, and no other intent was ever claimed."""
    kit = await make_kit(enforcer)
    log: list[str] = []
    count = [0]  # statements run so far
    def logging(inner: Any) -> Any:
        async def logged(sql: str, params: Any) -> Any:
            await asyncio.sleep(0)  # every statement a suspension point, as on a networked store
            count[0] += 1
            rows = await inner(sql, params)
            if rows and sql.startswith("UPDATE enf_payments SET state = 'BROADCAST'"):
                log.append(f"claim:{params[-1]}")
            return rows

        return logged

    # Both ways a statement runs: raw (tuples) and the typed operations' (rows by name).
    enforcer.store.execute_sql = logging(enforcer.store.execute_sql)  # type: ignore[method-assign]
    enforcer.store.fetch = logging(enforcer.store.fetch)  # type: ignore[method-assign]
    paid = 0
    for n in range(50):
        name = f"r{n}"
        token, address = await kit.agent(name, payees=())
        held = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key="x"))
        assert held.approval_id

        at_kill: list[str] = []
        held_id = held.approval_id
        done: list[bool] = []

        async def kill_after(
            statements: int, who: str = name, held_id: str = held_id, at_kill: list[str] = at_kill,
            done: list[bool] = done,
        ) -> None:
            start = count[0]
            while count[0] < start + statements and not done:  # let the approval run that far
                await asyncio.sleep(0)
            await enforcer.kill_agent(who)
            # The first read after the kill committed: a claim committed before the kill
            # shows here; one that would commit later cannot have been made.
            seen = await kit.payments.store.get(held_id)
            assert seen is not None
            at_kill.append(seen.state)

        async def approving(held_id: str = held_id, done: list[bool] = done) -> None:
            await approve(kit.payments, held_id)
            done.append(True)

        await asyncio.gather(approving(), kill_after(n % 16))
        i = await kit.payments.store.get(held_id)
        assert i is not None
        txs = kit.payment_txs(address)
        if txs:
            assert at_kill[0] in ("BROADCAST", "PAID", "SENT") and i.state == "SENT" and txs == [i.tx_id]
            paid += 1
        else:
            assert i.state in ("FAILED", "PENDING") and f"claim:{i.id}" not in log
    assert 5 < paid < 45  # both orders happened, often: the race was real


async def test_a_counter_leg_pays_once_and_sends_no_email(enforcer: Enforcer, sink: Sink) -> None:
    """The worker's counter-leg (POST /v1/counter through EnforcedPayer): the spend checks
    apply, the payment is made once per key, the email is the caller's."""
    from envelopay.enforcer.client.enforced_payer import EnforcedPayer
    from envelopay.enforcer.service.server import start_server
    from envelopay.errors import RailError

    kit = await make_kit(enforcer)
    token, address = await kit.agent(allow=())  # no mail allowlist: a counter-leg sends no mail
    runner, url = await start_server(enforcer, payments=kit.payments)
    try:
        payer = EnforcedPayer(url, token)
        to = payee_wallet()
        proof = await payer.pay_leg(chain=CHAIN, token="USDC", amount=USDC, recipient=to,
                                    payee="seller@partner.test", key="offer:seller:o1")
        again = await payer.pay_leg(chain=CHAIN, token="USDC", amount=USDC, recipient=to,
                                    payee="seller@partner.test", key="offer:seller:o1")
        assert proof == again and kit.payment_txs(address) == [proof["tx"]]
        assert sink.messages == [] and kit.usdc_of(to) == USDC
        try:
            await payer.pay_leg(chain=CHAIN, token="USDC", amount=USDC, recipient=to,
                                payee="eve@stranger.test", key="offer:eve:o2")
        except RailError as exc:
            assert exc.reason == "pending_approval"
        else:
            raise AssertionError("a stranger's counter-leg was paid")
        assert len(kit.payment_txs(address)) == 1
    finally:
        await runner.cleanup()
