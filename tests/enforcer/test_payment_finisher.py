"""The enforcer finishes in-flight payments while it serves (payment_finisher): a PAY the
payee's server would not take yet, a transaction the chain has not confirmed yet. Real
SQLite and PostgreSQL, LiteSVM, an aiosmtpd server; the controlled clock drives the
backoff."""

from __future__ import annotations

import asyncio
from typing import Any

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.finisher import Finisher
from envelopay.protocol.parse import parse

from .conftest import Clock, Sink
from .paykit import USDC, greylisted, make_kit, pay_req, payee_wallet, proof_tx


async def test_a_pay_the_server_would_not_take_yet_is_delivered_once_it_will(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    kit = await make_kit(enforcer)
    token, address, d = await greylisted(kit, sink)
    assert sink.messages == []
    fin = Finisher(kit.payments, interval=5.0, max_wait=20.0, settle=30.0)
    clock.now += 29.0
    assert await fin.once() == 0  # the call that made it may still be delivering (another process)
    # Still greylisted: each try waits twice as long as the one before (5, 10, 20, 20 s).
    tries = []
    start = clock.now
    for _ in range(60):
        clock.now += 1.0
        if await fin.once():
            tries.append(clock.now)
    assert [t - start for t in tries] == [1.0, 6.0, 16.0, 36.0, 56.0]  # waits of 5, 10, 20, 20 s
    assert sink.messages == []
    sink.fail_with = None  # the greylist lets it through now
    clock.now += 20.0
    assert await fin.once() == 1
    [(_, rcpts, raw)] = sink.messages
    pay = parse(raw)
    assert rcpts == ["seller@partner.test"] and pay.body and proof_tx(pay.body["proof"]) == d.tx_id
    status = await kit.payments.status(token, d.id)
    assert (status.status, status.message_id) == ("paid_and_sent", pay.message_id)
    clock.now += 600.0
    assert await fin.once() == 0 and len(sink.messages) == 1  # finished: never again
    assert kit.payment_txs(address) == [d.tx_id]  # one payment throughout


class _SlowChain:
    """The Solana payer, but the chain confirms a transaction only after `lookups` asks."""

    def __init__(self, inner: Any, lookups: int) -> None:
        self.inner, self.left = inner, lookups

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def broadcast(self, signed: Any) -> tuple[str, str]:
        outcome, _ = await self.inner.broadcast(signed)
        return outcome, "not yet confirmed"

    async def lookup(self, tx_id: str) -> str:
        if self.left > 0:
            self.left -= 1
            return "pending"
        state: str = await self.inner.lookup(tx_id)
        return state


async def test_a_transaction_confirmed_later_gets_its_pay_without_the_agent_asking(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    kit = await make_kit(enforcer)
    slow = _SlowChain(kit.payer, lookups=3)
    kit.payments.payers["solana-local"] = slow  # type: ignore[assignment]
    token, address = await kit.agent()
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
    assert d.state == "broadcast" and d.tx_id, d
    assert sink.messages == []
    fin = Finisher(kit.payments, interval=5.0)
    for _ in range(3):  # pending, pending (the call's own lookup took the first), confirmed
        clock.now += 60.0
        await fin.once()
    [(_, _, raw)] = sink.messages
    assert proof_tx(parse(raw).body["proof"]) == d.tx_id  # type: ignore[index]
    assert (await kit.payments.status(token, d.id)).status == "paid_and_sent"
    assert kit.payment_txs(address) == [d.tx_id]


async def test_an_intent_this_process_runs_or_another_may_run_is_left_alone(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(limit=None, payees=())  # a stranger: held for approval
    held = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, to="x@elsewhere.test"))
    assert held.status == "pending_approval"
    fin = Finisher(kit.payments, grace=60.0)
    assert await fin.once() == 0  # PENDING waits for a human, not for us
    # An approval whose executor is (as far as we can tell) still at work: not before `grace`.
    assert await kit.payments.store.approve(held.id, "operator", clock())
    clock.now += 30.0
    assert await fin.once() == 0 and kit.payment_txs(address) == []
    kit.payments._active.add(held.id)  # this process executes it: never
    clock.now += 120.0
    assert await fin.once() == 0
    kit.payments._active.discard(held.id)
    assert await fin.once() == 1  # stranded: executed once, as `approvals retry` would
    assert (await kit.payments.status(token, held.id)).status == "paid_and_sent"
    assert len(kit.payment_txs(address)) == 1 and len(sink.messages) == 1


async def test_serve_runs_passes_until_stopped(enforcer: Enforcer, sink: Sink, clock: Clock) -> None:
    kit = await make_kit(enforcer)
    token, _ = await kit.agent()
    sink.fail_with = "421 4.3.2 try later"
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
    assert d.state == "paid"
    sink.fail_with = None
    stop = asyncio.Event()
    task = asyncio.create_task(Finisher(kit.payments, interval=0.05, settle=0.0).serve(stop))
    for _ in range(200):
        if sink.messages:
            break
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert len(sink.messages) == 1
    assert (await kit.payments.status(token, d.id)).status == "paid_and_sent"
