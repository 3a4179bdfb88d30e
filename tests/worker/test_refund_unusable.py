"""Money the worker cannot use goes back, through the real path (garden, DKIM, ledger,
LiteSVM and eth-tester): a PAY whose transfer paid less than its INVOICE (or that says so)
is refunded in full and the OOPS amount_mismatch carries the refund; an overpayment's excess
above the tolerance is returned and the work is done; a redelivered PAY pays nothing twice."""

from __future__ import annotations

from typing import Any

import pytest

from envelopay.client.demo import PRICE, DemoWorld
from envelopay.engine import Outcome
from envelopay.protocol.messages import Fulfill, Invoice, Message, Oops, Order, Pay
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refunds import refunder_for

WALLET = {"solana-local": "buyer_sol", "base-local": "buyer_base"}


def _key(rail: Any) -> bytes:
    """The worker's own rail key, as its config's keypair file holds it."""
    kp = getattr(rail, "keypair", None)
    return bytes(kp) if kp is not None else bytes(rail._key)


def _refunding(w: DemoWorld, tolerance: str = "0") -> WorkerApplication:
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    rails = w.worker.engine.rails
    keys = {r.name: _key(r) for r in rails.values()}
    app.refunder = refunder_for(w.worker.store, rails=rails, keys=keys, owner="worker")
    app.overpay_tolerance = tolerance
    return app


def _balance(w: DemoWorld, chain: str) -> int:
    world = w.sol if chain.startswith("solana") else w.base
    return world.usdc_balance(w.wallets[WALLET[chain]]) or 0


async def _invoice(w: DemoWorld, chain: str, oid: str) -> tuple[Invoice, str]:
    task = {"name": "word_count", "text": "a b c", "rail": f"{chain}/USDC"}
    _, inv, flow = await w.exchange(Order(id=oid, task=task))
    assert isinstance(inv, Invoice)
    return inv, flow


async def _send(w: DemoWorld, pay: Pay, flow: str, *, by_hand: bool) -> tuple[Outcome, Message | None]:
    if not by_hand:
        out, reply, _ = await w.exchange(pay, flow_id=flow)
        return out, reply
    out = await w.inject(pay, forged=False)
    row = w.worker.store.outbox_get(out.outbox[0]) if out.outbox else None
    return out, row.outbound.message if row is not None else None


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
@pytest.mark.parametrize("says", ["invoice", "paid"])
async def test_an_underpaid_pay_is_refunded_in_full(demo_world: DemoWorld, chain: str, says: str) -> None:
    w = demo_world
    _refunding(w)
    inv, flow = await _invoice(w, chain, "o-under")
    before = _balance(w, chain)
    short = PRICE - 1000
    proof = await w.pay(w.buyer_rails, chain, "USDC", short, inv.wallet)
    assert _balance(w, chain) == before - short
    # The PAY says the INVOICE's amount (the rail finds less), or says what it paid (the table refuses).
    amount = inv.amount if says == "invoice" else short
    pay = Pay(id="p-under", amount=amount, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)
    out, reply = await _send(w, pay, flow, by_hand=says == "paid")  # our own client would not send it
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == "amount_mismatch"
    refund = (reply.error.model_extra or {})["refund"]
    assert refund["amount"] == str(short) and refund["chain"] == chain and refund["token"] == "USDC"
    assert refund["wallet"].lower() == w.wallets[WALLET[chain]].lower()
    assert refund["status"] == "paid" and refund["proof"]
    assert _balance(w, chain) == before  # all of it back
    assert w.flow_state(out.flow_id) == "invoiced"  # the INVOICE is still open to a right PAY
    # The same transfer presented again: the proof is spent, nothing is paid twice.
    again = Pay(id="p-under2", amount=amount, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)
    _, reply2 = await _send(w, again, flow, by_hand=says == "paid")
    assert isinstance(reply2, Oops)
    assert _balance(w, chain) == before


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_an_overpayments_excess_above_the_tolerance_goes_back(
    demo_world: DemoWorld, chain: str
) -> None:
    w = demo_world
    _refunding(w, tolerance="1000")
    inv, flow = await _invoice(w, chain, "o-over")
    before = _balance(w, chain)
    paid = PRICE + 50_000
    proof = await w.pay(w.buyer_rails, chain, "USDC", paid, inv.wallet)
    pay = Pay(id="p-over", amount=paid, token="USDC", chain=chain, proof=proof, invoice_ref=inv.id)
    out, reply, _ = await w.exchange(pay, flow_id=flow)
    assert not isinstance(reply, Oops), reply
    assert _balance(w, chain) == before - PRICE  # the price kept, the excess back
    rec = w.worker.store.get_flow(out.flow_id or "")
    assert rec is not None and rec.data["refund"]["amount"] == "50000"
    assert rec.data["refund"]["reason"] == "overpaid" and rec.data["refund"]["proof"]


async def test_an_excess_within_the_tolerance_is_kept(demo_world: DemoWorld) -> None:
    w = demo_world
    _refunding(w, tolerance="1%")
    inv, flow = await _invoice(w, "solana-local", "o-tol")
    before = _balance(w, "solana-local")
    paid = PRICE + PRICE // 100  # exactly 1%
    proof = await w.pay(w.buyer_rails, "solana-local", "USDC", paid, inv.wallet)
    pay = Pay(id="p-tol", amount=paid, token="USDC", chain="solana-local", proof=proof, invoice_ref=inv.id)
    _, reply, _ = await w.exchange(pay, flow_id=flow)
    assert isinstance(reply, Fulfill) or not isinstance(reply, Oops)
    assert _balance(w, "solana-local") == before - paid


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_a_prepaid_order_paying_too_little_is_refunded_and_too_much_returns_the_excess(
    demo_world: DemoWorld, chain: str
) -> None:
    w = demo_world
    _refunding(w)
    wallet = w.worker.engine.app.wallet(chain, "USDC")
    assert wallet is not None
    before = _balance(w, chain)
    short = await w.pay(w.buyer_rails, chain, "USDC", PRICE - 1, wallet)
    cheap = Order(v="0.2.0", id="o-pre-short", task={"name": "word_count", "text": "underpaid"},
                  amount=PRICE - 1, token="USDC", chain=chain, proof=short)
    _, reply, bflow = await w.exchange(cheap)
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == "amount_mismatch"
    assert (reply.error.model_extra or {})["refund"]["amount"] == str(PRICE - 1)
    assert _balance(w, chain) == before
    rec = w.buyer.store.get_flow(bflow)
    assert rec is not None and rec.state == "refunded" and rec.data["refund"]["verified"] is True
    rich = await w.pay(w.buyer_rails, chain, "USDC", PRICE + 7000, wallet)
    dear = Order(v="0.2.0", id="o-pre-rich", task={"name": "word_count", "text": "overpaid"},
                 amount=PRICE + 7000, token="USDC", chain=chain, proof=rich)
    _, reply, _ = await w.exchange(dear)
    assert isinstance(reply, Fulfill)
    assert _balance(w, chain) == before - PRICE  # the price kept, the excess back
