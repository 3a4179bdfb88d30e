"""`check_payment_store(factory)`: the spend enforcer's store contract
(envelopay.enforcer.spend.store, `PaymentStore`: sealed wallets, spend policies, spend
caps, payment intents) as a public kit both backends run, as `check_store` is for the ledger.

    from envelopay.testing.payment_store import check_payment_store
    await check_payment_store(my_factory)

`factory` is an async callable returning an open `PaymentStore` (its `EnforcerStore` open
and both components migrated); it is called once per check, and the checks use distinct
names and ids, so stores over one shared database do. Each check closes its store. A
failed check raises AssertionError naming it; the names of those that passed are returned.

The guarantees held beside each method's result: a spend cap is one conditional increment
(concurrent takers never pass it), an intent moves only along its state machine and each
move is one conditional update (one of two racing callers wins), a kill beats every move
toward money that comes after it, a reservation (caps + intent) is all or nothing, and one
live store instance at a time delivers a PAY.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import replace

from envelopay.enforcer.send.model import Agent, Policy, SendRequest
from envelopay.enforcer.spend.intent import Intent
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.schema import SPEND_MIGRATIONS
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import WalletRecord
from envelopay.testing.kit import run_async_checks

__all__ = ["PAYMENT_CHECKS", "check_payment_store"]

Factory = Callable[[], Awaitable[PaymentStore]]
T0 = 1_800_000_000.0
_seq = itertools.count(1)


def _tag(name: str) -> str:
    return f"{name}-{next(_seq)}-{id(object()):x}"


async def _agent(p: PaymentStore, tag: str) -> Agent:
    agent = Agent(id=f"pa-{tag}", name=f"pname-{tag}", address=f"{tag}@pay.test", status="ACTIVE",
                  policy=Policy())
    assert await p.store.create_agent(agent, f"ptoken-{tag}", T0)
    return agent


def _intent(agent: Agent, tag: str, n: int = 0, **kw: object) -> Intent:
    base = Intent(
        id=f"pi-{tag}-{n}", agent_id=agent.id, idem_key=f"key-{n}", invoice_key=None, kind="pay",
        state="PENDING", code="", reason="held", request={"payment": {"n": n}, "mail": {"to": "s@x"}},
        chain="solana-local", token="USDC", amount=1_500_000 + n, decimals=6, payee="seller@shop.test",
        wallet="W-payee", wallet_id=f"w-{tag}", invoice_ref=None, message_id=f"<{tag}.{n}@pay.test>",
        taken=[["h", "slot", 5]], tx_id=None, tx_blob=None, created_at=T0 + n, decided_at=None,
        decided_by=None, agent_name=agent.name,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


async def check_wallets(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("wallets")
        agent = await _agent(p, tag)
        other = WalletRecord(f"w2-{tag}", agent.id, "solana-local", "ADDR2", "spare", T0)
        default = WalletRecord(f"w1-{tag}", agent.id, "solana-local", "ADDR1", "default", T0 + 5)
        base = WalletRecord(f"w3-{tag}", agent.id, "base-local", "0xB", "default", T0)
        for w, key in ((other, b"k2"), (default, b"k1"), (base, b"k3")):
            assert await p.add_wallet(w, key)
        assert not await p.add_wallet(replace(default, id=f"w9-{tag}"), b"x"), "one label per chain"
        assert await p.wallets(agent.id) == [base, default, other]
        assert await p.wallet_for(agent.id, "solana-local") == default, "the default label first"
        assert await p.wallet_for(agent.id, "nowhere") is None
        assert await p.sealed(default.id, agent.id) == b"k1"
        assert await p.sealed(default.id, "another-agent") is None, "a key is its agent's only"
        await p.put_policy(agent.id, SpendPolicy(payees=("shop.test",)), T0)
        prior = _intent(agent, tag, 1, idem_key="ctx-key")
        assert await p.insert_intent(prior, T0)
        ctx = await p.context(f"ptoken-{tag}", "solana-local", "ctx-key")
        assert ctx is not None and ctx.agent == agent and ctx.policy.payees == ("shop.test",)
        assert ctx.prior_id == prior.id and ctx.wallet == replace(default, chain="solana-local")
        assert ctx.sealed == b"k1"
        bare = await p.context(f"ptoken-{tag}", "nowhere", "other-key")
        assert bare is not None and bare.wallet is None and bare.sealed is None and bare.prior_id is None
        assert await p.context("no-such-token", "solana-local", "k") is None
    finally:
        await p.store.close()


async def check_policies(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("policies")
        agent = await _agent(p, tag)
        assert await p.policy(agent.id) == SpendPolicy(), "no policy: the empty one (everything held)"
        first = SpendPolicy(limits={"solana-local/USDC": SpendLimit(per_payment=5, hourly=10, daily=20)},
                            payees=("shop.test",), require_invoice=True)
        await p.put_policy(agent.id, first, T0)
        assert await p.policy(agent.id) == first
        second = SpendPolicy(wallets=("W",))
        await p.put_policy(agent.id, second, T0 + 1)
        assert await p.policy(agent.id) == second, "a policy is replaced whole"
    finally:
        await p.store.close()


async def check_spend_caps(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("spend")
        agent = await _agent(p, tag)
        asset, win, slot = "solana-local/USDC", "h", "2027-01-15T10"
        assert await p.spent(agent.id, asset, win, slot) == 0
        assert not await p.take_spend(agent.id, asset, win, slot, 11, 10), "over the cap on the first take"
        assert await p.spent(agent.id, asset, win, slot) == 0
        # Ten concurrent takes of 3 under a cap of 10: one conditional increment each, three pass.
        got = await asyncio.gather(*(p.take_spend(agent.id, asset, win, slot, 3, 10) for _ in range(10)))
        assert sum(got) == 3, got
        assert await p.spent(agent.id, asset, win, slot) == 9
        assert await p.take_spend(agent.id, asset, win, "big", 2**61, 2**62 - 1), "64-bit amounts"
        assert not await p.take_spend(agent.id, asset, win, "big", 2**61, 2**62 - 1)
        await p.give_spend(agent.id, asset, win, slot, 4)
        assert await p.spent(agent.id, asset, win, slot) == 5
        await p.give_spend(agent.id, asset, win, slot, 50)
        assert await p.spent(agent.id, asset, win, slot) == 5, "never below zero"
    finally:
        await p.store.close()


async def check_intent_reads(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("reads")
        agent = await _agent(p, tag)
        i = _intent(agent, tag, 1, invoice_key="inv-key", invoice_ref="inv_1")
        assert await p.insert_intent(i, T0 + 1)
        assert not await p.insert_intent(replace(i, id=f"other-{tag}"), T0), "one intent per key"
        assert await p.get(i.id) == i
        assert await p.by_key(agent.id, "key-1") == i
        assert await p.by_invoice(agent.id, "inv-key") == i
        assert await p.get(f"none-{tag}") is None and await p.by_key(agent.id, "nokey") is None
        assert await p.by_invoice(agent.id, "noinv") is None
        assert i.to_json()["amount_human"] == "1.500001"
    finally:
        await p.store.close()


async def check_intent_states(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("states")
        agent = await _agent(p, tag)
        i = _intent(agent, tag, 1)
        assert await p.insert_intent(i, T0)
        assert not await p.claim(i.id, T0), "PENDING is not claimable"
        won = await asyncio.gather(p.approve(i.id, "op1", T0 + 1), p.reject(i.id, "op2", "no", T0 + 1))
        assert sorted(won) == [False, True], won
        again = _intent(agent, tag, 2)
        assert await p.insert_intent(again, T0)
        assert await p.approve(again.id, "op", T0 + 1)
        claims = await asyncio.gather(*(p.claim(again.id, T0 + 2) for _ in range(4)))
        assert sum(claims) == 1, claims
        assert not await p.mark_broadcast(again.id, T0 + 3), "BROADCAST only from SIGNED"
        assert await p.mark_signed(again.id, "tx-1", b"\x01\x02", T0 + 3)
        assert await p.mark_broadcast(again.id, T0 + 4)
        assert not await p.fail(again.id, "SIGNED", "x", "too late", T0 + 5), "FAILED only from its state"
        assert await p.mark_paid(again.id, T0 + 5)
        assert await p.mark_sent(again.id, "", T0 + 6)
        assert not await p.mark_sent(again.id, "", T0 + 7), "SENT once"
        done = await p.get(again.id)
        assert done is not None and done.state == "SENT" and done.tx_id == "tx-1"
        assert done.tx_blob == b"\x01\x02"
        assert done.decided_by == "op" and done.decided_at == T0 + 1
        # RESERVED -> BROADCAST in one write, this instance the deliverer.
        live = _intent(agent, tag, 3, state="RESERVED")
        assert await p.insert_intent(live, T0)
        assert await p.mark_signed_broadcast(live.id, "tx-3", b"\x03", T0 + 1)
        got = await p.get(live.id)
        assert got is not None and got.state == "BROADCAST" and got.deliverer == p.store.instance
        assert await p.take_delivery(live.id, T0 + 2), "its own deliverer delivers"
        assert await p.paid_note(live.id, "greylisted", T0 + 3)
        noted = await p.get(live.id)
        assert noted is not None and noted.state == "PAID" and noted.deliverer is None
        assert noted.reason == "greylisted"
        await p.note(live.id, "PAID", "retrying", T0 + 4)
        await p.note(live.id, "SENT", "ignored: not its state", T0 + 4)
        noted = await p.get(live.id)
        assert noted is not None and noted.reason == "retrying"
        assert await p.take_delivery(live.id, T0 + 5)
        assert not await p.take_delivery(f"none-{tag}", T0 + 5)
        failing = _intent(agent, tag, 4, invoice_key="k4", state="APPROVED")
        assert await p.insert_intent(failing, T0)
        assert not await p.fail(failing.id, "PENDING", "payee_refused", "no", T0 + 1), "not its state"
        assert await p.fail(failing.id, "APPROVED", "payee_refused", "no", T0 + 1)
        failed = await p.get(failing.id)
        assert failed is not None and failed.state == "FAILED" and failed.code == "payee_refused"
        assert failed.invoice_key is None, "a failed intent lets its invoice be paid again"
    finally:
        await p.store.close()


async def check_kill_beats_money(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("kill")
        agent = await _agent(p, tag)
        pending, approved, reserved, signed = (_intent(agent, tag, n) for n in range(4))
        assert await p.insert_intent(pending, T0)
        assert await p.insert_intent(replace(approved, state="APPROVED"), T0)
        assert await p.insert_intent(replace(reserved, state="RESERVED"), T0)
        assert await p.insert_intent(replace(signed, state="SIGNED"), T0)
        assert await p.store.kill_agent(agent.name) is not None
        assert not await p.approve(pending.id, "op", T0 + 1)
        assert not await p.claim(approved.id, T0 + 1)
        assert not await p.mark_signed(reserved.id, "t", b"x", T0 + 1)
        assert not await p.mark_signed_broadcast(reserved.id, "t", b"x", T0 + 1)
        assert not await p.mark_broadcast(signed.id, T0 + 1)
        assert await p.fail(signed.id, "SIGNED", "agent_killed", "killed", T0 + 2), "it can still fail"
    finally:
        await p.store.close()


async def check_queue_and_in_flight(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("queue")
        agent = await _agent(p, tag)
        for n, state in enumerate(("PENDING", "PENDING", "PENDING", "RESERVED", "BROADCAST", "SENT")):
            assert await p.insert_intent(_intent(agent, tag, n, state=state), T0)
        assert await p.reject(f"pi-{tag}-0", "op", "no", T0 + 9)
        assert await p.approve(f"pi-{tag}-2", "op", T0 + 9)  # only decided intents show past PENDING
        mine = [i for i in await p.queue(limit=10_000) if i.agent_id == agent.id]
        assert [i.id for i in mine] == [f"pi-{tag}-1", f"pi-{tag}-2", f"pi-{tag}-0"], [i.id for i in mine]
        flying = {i.id for i in await p.in_flight() if i.agent_id == agent.id}
        assert flying == {f"pi-{tag}-2", f"pi-{tag}-3", f"pi-{tag}-4"}
    finally:
        await p.store.close()


async def check_reserve_and_finish(factory: Factory) -> None:
    p = await factory()
    try:
        tag = _tag("reserve")
        agent = await _agent(p, tag)
        asset = "solana-local/USDC"
        caps = [
            p.spend_step(agent.id, asset, "h", "r1", 5, 10),
            p.spend_step(agent.id, asset, "d", "r1", 5, 6),
        ]
        first = await p.reserve(caps, _intent(agent, tag, 1, state="RESERVED"), T0)
        assert first.committed
        second = await p.reserve(caps, _intent(agent, tag, 2, state="RESERVED"), T0)
        assert second.refused_at == 1, "the daily cap refused"
        assert await p.spent(agent.id, asset, "h", "r1") == 5, "a refused reservation takes nothing"
        assert await p.get(f"pi-{tag}-2") is None
        dup = await p.reserve([], _intent(agent, tag, 3, idem_key="key-1", state="RESERVED"), T0)
        assert dup.refused_at == 0, "the key was taken"
        assert await p.mark_signed_broadcast(f"pi-{tag}-1", "tx", b"b", T0 + 1)
        mail = SendRequest(to="seller@shop.test", sender=f"{tag}@pay.test", msg_type="order",
                           body={"id": f"ord_{tag}"}, message_id=f"<{tag}.1@pay.test>")
        send = p.store.send_step(id=f"send-{tag}", agent_id=agent.id, state="SENT", reason="", request=mail,
                                 fingerprint="f", message_id=mail.message_id, now=T0 + 2)
        assert await p.finish_sent(send, f"pi-{tag}-1", T0 + 2)
        sent = await p.get(f"pi-{tag}-1")
        assert sent is not None and sent.state == "SENT"
        orders = await p.sent_orders(agent.id, f"ord_{tag}")
        assert [m for _, m in orders] == [mail.message_id] and orders[0][0]["body"] == {"id": f"ord_{tag}"}
        assert await p.sent_orders(agent.id, "ord_none") == []
    finally:
        await p.store.close()


async def check_migrate_idempotent(factory: Factory) -> None:
    p = await factory()
    try:
        await p.open()
        await p.open()
        assert await p.store.migrate(SPEND_MIGRATIONS) == SPEND_MIGRATIONS.latest
    finally:
        await p.store.close()


PAYMENT_CHECKS: tuple[Callable[[Factory], Awaitable[None]], ...] = (
    check_wallets,
    check_policies,
    check_spend_caps,
    check_intent_reads,
    check_intent_states,
    check_kill_beats_money,
    check_queue_and_in_flight,
    check_reserve_and_finish,
    check_migrate_idempotent,
)


async def check_payment_store(factory: Factory) -> list[str]:
    """Run every payment-store check against stores made by `factory`; return their names."""
    return await run_async_checks(PAYMENT_CHECKS, factory)
