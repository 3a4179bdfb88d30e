"""The spend enforcer paying on Base (eth-tester in process, the Vyper ERC-20): custody of
a Base key, pay-then-send, a retried call, a refusal, a broadcast recovered from the chain."""

from __future__ import annotations

import contextlib

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.payments_exec import recover
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.protocol.parse import parse
from envelopay_base.custody import BasePayer
from envelopay_base.local import LocalChain
from envelopay_base.rail import make_rail

from .conftest import Sink
from .paykit import proof_tx

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
    assert proof_tx(parse(sink.messages[-1][2]).body["proof"]) == d.tx_id  # type: ignore[index]
    big = await payments.submit("pay", token, {**req, "amount": "9000000", "idempotency_key": "b-2"})
    assert (big.status, big.code) == ("pending_approval", "over_payment_max")
    bal = await payments.balances(token)
    assert bal["wallets"][0]["balances"]["USDC"]["amount"] == "48000000"


async def test_a_signed_payment_whose_nonce_was_used_ends_expired_and_moves_nothing(
    enforcer: Enforcer, sink: Sink
) -> None:
    """The enforcer dies after recording the signed bytes; meanwhile another transaction
    from the same key takes that nonce. Recovery broadcasts the recorded bytes, eth-tester
    refuses them for their nonce, the payer says "expired", and the intent ends FAILED
    (`expired`) with its spend handed back: no second payment, no email."""
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

    vault = Vault(b"test-vault-secret-0123456789abcdef")
    payments = Payments(enforcer, store, vault, {CHAIN: payer}, crash_hook=crash)
    _, token = await enforcer.create_agent("b2", "b2@agents.test", allow=("partner.test",))
    wallet = await payments.create_wallet("b2", CHAIN)
    chain.fund(wallet.address, eth=10**18, usdc=50_000_000)
    await payments.set_policy("b2", SpendPolicy(limits={f"{CHAIN}/USDC": SpendLimit(per_payment=5_000_000,
                                                                                     daily=10_000_000)},
                                                payees=("partner.test",)))
    to, _ = chain.new_wallet()
    other, _ = chain.new_wallet()
    req = {"to": "seller@partner.test", "chain": CHAIN, "token": "USDC", "amount": "2000000", "wallet": to,
           "idempotency_key": "n-1"}
    with contextlib.suppress(SystemExit):
        await payments.submit("pay", token, req)
    (row,) = await enforcer.store.execute_sql("SELECT id, state, tx_id FROM enf_payments", ())
    assert row[1] == "BROADCAST" and row[2]  # the tx id recorded, the bytes never sent
    # The same key pays someone else first, with the same (next) nonce.
    sealed = await store.sealed(wallet.id, wallet.agent_id)
    assert sealed is not None
    secret = vault.open_secret(sealed, agent_id=wallet.agent_id, wallet_id=wallet.id)
    rival = await payer.prepare(secret, token="USDC", amount=1_000_000, recipient=other)
    assert await payer.broadcast(rival) == ("sent", "")
    assert chain.token_balance(other) == 1_000_000
    mails = len(sink.messages)

    assert await recover(payments) == 1
    i = await store.get(row[0])
    assert i is not None and (i.state, i.code) == ("FAILED", "expired"), (i.state, i.code, i.reason)
    assert i.tx_id == row[2] and await payer.lookup(row[2]) == "missing"  # those bytes never landed
    assert chain.token_balance(to) == 0 and chain.token_balance(wallet.address) == 49_000_000
    assert len(sink.messages) == mails  # no PAY email for money that did not move
    spends = [t for t in i.taken if t[0] == "spend"]
    assert spends  # the caps it took, all handed back
    for _kind, asset, win, slot, _amount in spends:
        assert await store.spent(wallet.agent_id, asset, win, slot) == 0
    again = await payments.submit("pay", token, req)  # a retried call returns the first outcome
    assert (again.status, again.id, again.code) == ("failed", row[0], "expired")
