"""Refunds paid through the spend enforcer (transport.payments = "enforcer"): the worker
holds no key; the enforcer pays from the agent's wallet it holds, once per refund key —
a refund in doubt (asked, the answer lost) is asked again with the same key and answers
the first payment; a refund the spend policy refuses moves nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay.client.demo import WORKER, DemoWorld
from envelopay.enforcer.client.enforced_payer import EnforcedPayer
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.ledger.refunds import RefundOrder
from envelopay.mail.transport.garden import GardenTransport
from envelopay.worker.refunds import refunder_for
from envelopay_base.custody import BasePayer
from envelopay_base.rail import make_rail

USDC = 1_000_000


@dataclass
class Enforced:
    url: str
    token: str
    wallet: str  # the agent's wallet the enforcer holds


@pytest.fixture
async def enforced(demo_world: DemoWorld, tmp_path: Path) -> AsyncIterator[Enforced]:
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    enforcer = Enforcer(store, GardenTransport(tmp_path / "none.sock", reuse=False))
    pstore = PaymentStore(store)
    await pstore.open()
    rail = make_rail({**demo_world.base.rail_options(), "confirm_timeout": 5, "poll_interval": 0.01})
    payments = Payments(enforcer, pstore, Vault(b"test-vault-secret-0123456789abcdef"),
                        {"base-local": BasePayer(rail)})
    _, token = await enforcer.create_agent("worker", WORKER)
    wallet = await payments.create_wallet("worker", "base-local")
    demo_world.base.fund(wallet.address, native=10**18, usdc=10 * USDC)
    limits = {"base-local/USDC": SpendLimit(per_payment=3 * USDC, daily=5 * USDC)}
    await payments.set_policy("worker", SpendPolicy(limits=limits, payees=("garden.local",)))
    runner, url = await start_server(enforcer, payments=payments)
    try:
        yield Enforced(url, token, wallet.address)
    finally:
        await runner.cleanup()
        await store.close()


def _order(w: DemoWorld, key: str, amount: int) -> RefundOrder:
    return RefundOrder(key=key, local=WORKER, peer="buyer@garden.local", flow_id="flow_e", chain="base-local",
                       token="USDC", amount=amount, recipient=w.wallets["buyer_base"], reason="task_failed")


async def test_a_refund_through_the_enforcer_is_paid_once_even_when_its_answer_was_lost(
    demo_world: DemoWorld, enforced: Enforced
) -> None:
    w = demo_world
    payer = EnforcedPayer(enforced.url, enforced.token)
    refunder = refunder_for(w.worker.store, rails={}, counter_payer=payer, owner="worker",
                            clock=lambda: datetime.now(UTC))
    before = w.base.usdc_balance(w.wallets["buyer_base"]) or 0
    # A worker asked the enforcer and died before it heard the answer: the enforcer paid.
    lost = await payer.pay_leg(chain="base-local", token="USDC", amount=2 * USDC,
                               recipient=w.wallets["buyer_base"], payee="buyer@garden.local",
                               key="refund:job:job_lost")
    assert w.base.usdc_balance(w.wallets["buyer_base"]) == before + 2 * USDC
    # The restarted worker asks again with the same key: the first payment is the answer.
    again = await refunder.refund(_order(w, "job:job_lost", 2 * USDC))
    assert again.paid and again.refund is not None and again.refund.proof == lost
    assert w.base.usdc_balance(w.wallets["buyer_base"]) == before + 2 * USDC  # once
    third = await refunder.refund(_order(w, "job:job_lost", 2 * USDC))
    assert third.refund is not None and third.refund.proof == lost
    assert w.base.usdc_balance(enforced.wallet) == 8 * USDC  # from the wallet the enforcer holds


async def test_a_refund_the_enforcer_holds_for_approval_is_pending_and_moves_nothing(
    demo_world: DemoWorld, enforced: Enforced
) -> None:
    w = demo_world
    payer = EnforcedPayer(enforced.url, enforced.token)
    refunder = refunder_for(w.worker.store, rails={}, counter_payer=payer, owner="worker")
    before = w.base.usdc_balance(w.wallets["buyer_base"]) or 0
    held = await refunder.refund(_order(w, "job:job_big", 4 * USDC))  # above its per-payment cap
    assert held.status == "pending" and held.refund is not None and held.refund.status == "paying"
    assert w.base.usdc_balance(w.wallets["buyer_base"]) == before
    # Asked again (the runner does, every few seconds): the same key, still held, still nothing paid.
    assert (await refunder.refund(_order(w, "job:job_big", 4 * USDC))).status == "pending"
    assert w.base.usdc_balance(w.wallets["buyer_base"]) == before
