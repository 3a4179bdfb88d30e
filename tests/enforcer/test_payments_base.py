"""The spend enforcer paying on Base (eth-tester in process, the Vyper ERC-20): custody of
a Base key, pay-then-send, a retried call, a refusal, a broadcast recovered from the chain."""

from __future__ import annotations

import contextlib

from envelopay.enforcer.core import Enforcer
from envelopay.enforcer.custody import Vault
from envelopay.enforcer.payment_store import PaymentStore
from envelopay.enforcer.payments import Payments
from envelopay.enforcer.payments_exec import recover
from envelopay.enforcer.spend import SpendLimit, SpendPolicy
from envelopay.protocol.parse import parse
from envelopay_base.custody import BasePayer
from envelopay_base.local import LocalChain
from envelopay_base.rail import make_rail

from .conftest import Sink

CHAIN = "base-local"


async def test_base_wallet_pays_then_sends_and_recovers(enforcer: Enforcer, sink: Sink) -> None:
    chain = LocalChain(blocks_per_tx=1)
    payer = BasePayer(make_rail({"backend": "local", "local_chain": chain, "confirm_timeout": 5,
                                 "poll_interval": 0.01}))
    store = PaymentStore(enforcer.store)
    await store.open()
    crashes: list[str] = []

    def crash(point: str) -> None:
        if point == "after_sign" and not crashes:
            crashes.append(point)
            raise SystemExit("simulated crash after the tx id was recorded")

    payments = Payments(enforcer, store, Vault(b"test-vault-secret-0123456789abcdef"), {CHAIN: payer},
                        crash_hook=crash)
    _, token = await enforcer.create_agent("b1", "b1@agents.test", allow=("partner.test",))
    wallet = await payments.create_wallet("b1", CHAIN)
    assert wallet.address.startswith("0x") and len(wallet.address) == 42
    chain.fund(wallet.address, eth=10**18, usdc=50_000_000)
    await payments.set_policy("b1", SpendPolicy(limits={f"{CHAIN}/USDC": SpendLimit(per_payment=5_000_000)},
                                                payees=("partner.test",)))
    to, _ = chain.new_wallet()
    req = {"to": "seller@partner.test", "chain": CHAIN, "token": "USDC", "amount": "2000000", "wallet": to,
           "idempotency_key": "b-1"}
    with contextlib.suppress(SystemExit):
        await payments.submit("pay", token, req)
    assert chain.token_balance(to) == 0  # signed and recorded, never broadcast
    assert await recover(payments) == 1  # restart: the recorded bytes, not a new signature
    d = await payments.submit("pay", token, req)
    assert d.status == "paid_and_sent" and d.tx_id and chain.token_balance(to) == 2_000_000
    assert parse(sink.messages[-1][2]).body["proof"] == {"tx": d.tx_id}  # type: ignore[index]
    big = await payments.submit("pay", token, {**req, "amount": "9000000", "idempotency_key": "b-2"})
    assert (big.status, big.code) == ("pending_approval", "over_payment_max")
    bal = await payments.balances(token)
    assert bal["wallets"][0]["balances"]["USDC"]["amount"] == "48000000"
