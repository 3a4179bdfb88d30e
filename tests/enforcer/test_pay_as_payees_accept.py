"""An enforced payment becomes a message its payee accepts (SPEC "From an enforced payment
to a PAY the payee accepts"), and the money rules hold on every route: the proof is bound
to its payer as `envelopay pay` binds it, on PAY, OFFER, ACCEPT and prepaid ORDER; a leg
that cannot be bound moves no money; require_invoice covers every route; agents' keys
never meet derived ones; an ambiguous INVOICE id is refused; amounts past 64 bits are
refused on both stores; the payee's OOPS makes the payment `paid_refused`; an enforcer
without payments says `payments_disabled`."""

from __future__ import annotations

import mailbox
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from envelopay import dkim
from envelopay.enforcer.client.payment_client import PaymentClient
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.invoices import MaildirInvoices
from envelopay.enforcer.spend.policy import SpendLimit
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Invoice, Oops, OopsError, Order
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parse import parse
from envelopay.rails.binding import declared_binding, statement
from envelopay_solana.custody import SolanaPayer

from .conftest import Sink
from .paykit import CHAIN, USDC, Kit, make_kit, pay_req, payee_wallet, proof_tx

SELLER = dkim.DkimKey.generate_ed25519()
OTHER = dkim.DkimKey.generate_ed25519()
DNS = dkim.table_dns({
    "s1._domainkey.partner.test": SELLER.dns_txt_record(),
    "s1._domainkey.other.test": OTHER.dns_txt_record(),
})
_n = [0]


def _signed(message: Any, *, sender: str, key: dkim.DkimKey | None, irt: str | None = None) -> bytes:
    _n[0] += 1
    domain = sender.rsplit("@", 1)[1]
    raw = compose(Outbound(
        sender=sender, recipient="buyer@agents.test", message=message,
        message_id=f"<m{_n[0]}@{domain}>", date=datetime.now(UTC), in_reply_to=irt,
    ))
    return raw if key is None else dkim.sign(raw, selector="s1", domain=domain, key=key)


def _deliver(root: Path, raw: bytes) -> str:
    root.mkdir(parents=True, exist_ok=True)
    mailbox.Maildir(root / "buyer@agents.test", create=True).add(raw)  # the garden's layout
    mid = parse(raw).message_id
    assert mid
    return mid


def _check_binding(kit: Kit, raw: bytes, presenter: str = "buyer@agents.test") -> str:
    """What the payee's engine checks (engine/verify.binding_check): payer_sig is the paying
    wallet's signature of this presentation. Returns the bound tx."""
    parsed = parse(raw)
    body = dict(parsed.body or {})
    leg = body["give"] if body["type"] == "offer" else body
    proof = leg["proof"]
    declared = declared_binding(proof)
    assert declared is not None, proof
    said = statement(payee=parsed.to_addrs[0], payer=presenter, message_id=body["id"], chain=leg["chain"],
                     tx=kit.payer.proof_key(proof))
    assert kit.payer.rail.check_payer_sig(declared[0], said, declared[1])
    # ... and not of another presentation: another id fails.
    assert not kit.payer.rail.check_payer_sig(
        declared[0], statement(payee=parsed.to_addrs[0], payer=presenter, message_id="other",
                               chain=leg["chain"], tx=kit.payer.proof_key(proof)), declared[1])
    tx = proof_tx(proof)
    assert tx is not None
    return tx


async def test_every_leg_carries_a_proof_bound_to_the_paying_wallet(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent()
    to = payee_wallet()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("pay", pay_req(to, key="p1")),
        ("offer", {**pay_req(to, key="o1"), "want": {"amount": "5", "token": "USDC", "chain": CHAIN}}),
        ("accept", {**pay_req(to, key="a1"), "offer_ref": "their-offer"}),
        ("order", {**pay_req(to, key="r1"), "task": {"name": "word_count", "text": "a b"}}),
    ]
    for n, (kind, req) in enumerate(calls):
        d = await kit.payments.submit(kind, token, req)
        assert d.status == "paid_and_sent", (kind, d)
        raw = sink.messages[n][2]
        assert _check_binding(kit, raw) == d.tx_id
        parsed = parse(raw)
        assert parsed.valid and parsed.type is not None and parsed.type.value == kind
    order = parse(sink.messages[3][2]).message
    assert isinstance(order, Order) and order.prepaid and order.v == "0.2.0" and order.amount == USDC
    assert len(kit.payment_txs(address)) == 4


class _Unbindable(SolanaPayer):
    def sign_statement(self, secret: bytes, message: bytes) -> tuple[str, str]:
        raise ValueError("this key cannot sign a binding")


async def test_a_leg_that_cannot_be_bound_moves_no_money(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    kit.payments.payers[CHAIN] = _Unbindable(kit.payer.rail)
    token, address = await kit.agent()
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet()))
    assert (d.status, d.code) == ("failed", "pay_unsendable"), d
    assert kit.payment_txs(address) == [] and sink.messages == []
    # The caps it took were handed back: the full daily cap still fits.
    kit.payments.payers[CHAIN] = kit.payer
    full = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 10 * USDC, key="again"))
    assert full.status == "paid_and_sent", full


async def test_require_invoice_holds_on_every_route(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent(require_invoice=True)
    to = payee_wallet()
    for kind, extra in (
        ("pay", {}),
        ("offer", {"want": {"amount": "5", "token": "USDC", "chain": CHAIN}}),
        ("accept", {"offer_ref": "x1"}),
        ("order", {"task": {"name": "t"}}),
        ("counter", {}),
    ):
        d = await kit.payments.submit(kind, token, {**pay_req(to, key=f"k-{kind}"), **extra})
        assert (d.status, d.code) == ("blocked", "invoice_required"), kind
    assert kit.payment_txs(address) == [] and sink.messages == []


@pytest.mark.parametrize("key", ["invoice:seller@partner.test:inv1", "INVOICE:x", "id:pay-1"])
async def test_an_agents_key_never_takes_a_derived_keys_form(enforcer: Enforcer, key: str) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent()
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key=key))
    assert (d.status, d.code) == ("blocked", "invalid_request")
    assert kit.payment_txs(address) == []


async def _bound_world(enforcer: Enforcer, tmp_path: Path) -> tuple[Kit, str, str, Path]:
    root = tmp_path / "mail"
    kit = await make_kit(enforcer, invoices=MaildirInvoices(root), dns=DNS)
    token, address = await kit.agent(payees=("partner.test", "other.test"),
                                      allow=("partner.test", "other.test"),
                                      limit=SpendLimit(per_payment=10 * USDC, daily=50 * USDC))
    for to in ("seller@partner.test", "seller@other.test"):
        sent = await enforcer.send(token, {"to": to, "from": "buyer@agents.test", "type": "order",
                                           "body": {"v": "0.1.0", "type": "order", "id": "o1", "task": "t"}})
        assert sent.status == "sent"
    return kit, token, address, root


def _invoice(sender: str, key: dkim.DkimKey, wallet: str, amount: int = 2 * USDC) -> bytes:
    inv = Invoice(id="inv1", amount=amount, token="USDC", chain=CHAIN, wallet=wallet, order_ref="o1")
    return _signed(inv, sender=sender, key=key)


async def test_an_invoice_id_two_payees_used_is_refused_until_named(
    enforcer: Enforcer, sink: Sink, tmp_path: Path
) -> None:
    kit, token, address, root = await _bound_world(enforcer, tmp_path)
    a_wallet, b_wallet = payee_wallet(), payee_wallet()
    _deliver(root, _invoice("seller@partner.test", SELLER, a_wallet))
    b_mid = _deliver(root, _invoice("seller@other.test", OTHER, b_wallet, 3 * USDC))
    d = await kit.payments.submit("pay_invoice", token, {"invoice": "inv1"})
    assert (d.status, d.code) == ("blocked", "invoice_ambiguous")
    assert "seller@other.test" in d.reason and "seller@partner.test" in d.reason
    assert kit.payment_txs(address) == []
    wrong = await kit.payments.submit(
        "pay_invoice", token, {"invoice": b_mid, "payee": "seller@partner.test"}
    )
    assert (wrong.status, wrong.code) == ("blocked", "invoice_not_from_payee")
    by_sender = await kit.payments.submit(
        "pay_invoice", token, {"invoice": "inv1", "payee": "seller@partner.test"}
    )
    assert by_sender.status == "paid_and_sent" and by_sender.payee == "seller@partner.test"
    assert by_sender.wallet == a_wallet and kit.usdc_of(a_wallet) == 2 * USDC
    by_mid = await kit.payments.submit("pay_invoice", token, {"invoice": b_mid})
    assert by_mid.status == "paid_and_sent" and by_mid.payee == "seller@other.test"
    assert kit.usdc_of(b_wallet) == 3 * USDC and len(kit.payment_txs(address)) == 2
    # Each PAY answers its INVOICE: one thread on both sides.
    pay = parse(sink.messages[-1][2])
    assert pay.in_reply_to == b_mid and pay.body is not None and pay.body["invoice_ref"] == "inv1"


@pytest.mark.parametrize("amount", [2**63, 2**63 + 7, 10**30])
async def test_an_invoice_amount_past_64_bits_is_refused_on_both_stores(
    enforcer: Enforcer, tmp_path: Path, amount: int
) -> None:
    kit, token, address, root = await _bound_world(enforcer, tmp_path)
    mid = _deliver(root, _invoice("seller@partner.test", SELLER, payee_wallet(), amount))
    d = await kit.payments.submit("pay_invoice", token, {"invoice": mid})
    assert (d.status, d.code) == ("blocked", "invoice_amount_out_of_range")
    d = await kit.payments.submit("pay", token, {**pay_req(payee_wallet(), key="big"), "amount": str(amount)})
    assert (d.status, d.code) == ("blocked", "invalid_request")
    assert kit.payment_txs(address) == []


async def test_the_payees_oops_makes_the_payment_paid_refused(
    enforcer: Enforcer, sink: Sink, tmp_path: Path
) -> None:
    kit, token, address, root = await _bound_world(enforcer, tmp_path)
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key="p"))
    assert d.status == "paid_and_sent" and d.message_id
    pay_id = parse(sink.messages[-1][2]).id
    oops = Oops(note="wrong amount", error=OopsError(code="amount_mismatch"), ref=pay_id)
    # Forged: unsigned, or signed by another domain, or from someone else: not the payee's.
    _deliver(root, _signed(oops, sender="seller@partner.test", key=None, irt=d.message_id))
    _deliver(root, _signed(oops, sender="seller@other.test", key=OTHER, irt=d.message_id))
    assert d.id is not None
    assert (await kit.payments.status(token, d.id)).status == "paid_and_sent"
    # An OOPS about another PAY of the same thread is not this one's either.
    other = Oops(note="x", error=OopsError(code="tx_not_found"), ref="someone-else")
    _deliver(root, _signed(other, sender="seller@partner.test", key=SELLER, irt=d.message_id))
    assert (await kit.payments.status(token, d.id)).status == "paid_and_sent"
    _deliver(root, _signed(oops, sender="seller@partner.test", key=SELLER, irt=d.message_id))
    seen = await kit.payments.status(token, d.id)
    assert (seen.status, seen.code, seen.tx_id) == ("paid_refused", "amount_mismatch", d.tx_id)
    assert len(kit.payment_txs(address)) == 1


async def test_an_enforcer_without_payments_says_so(enforcer: Enforcer) -> None:
    _, token = await enforcer.create_agent("m1", "m1@agents.test")
    runner, url = await start_server(enforcer)  # no payments
    try:
        async with PaymentClient(url, token) as client:
            for kind in ("pay", "pay_invoice", "offer", "accept", "order"):
                d = await client.submit(kind, {"invoice": "x"})
                assert (d.status, d.code) == ("blocked", "payments_disabled")
                assert "--vault-key-file" in d.reason and "--pay-rail" in d.reason
            assert (await client.status("any")).code == "payments_disabled"
            assert (await client.balances())["code"] == "payments_disabled"
        async with httpx.AsyncClient() as http:
            r = await http.get(f"{url}/v1/agents/m1/policy", headers={"Authorization": "Bearer op"})
            assert r.status_code in (401, 409)  # never the 404 a client reads as unreachable
    finally:
        await runner.cleanup()


async def test_an_offer_asks_for_its_want_leg_on_the_want_chain(enforcer: Enforcer, sink: Sink) -> None:
    """The OFFER's `wallet` is where the peer pays the want leg: on the want leg's chain. The
    give leg's wallet (a Solana address) cannot receive on Base: such an OFFER is refused
    before any money moves, unless the call names a receive_wallet."""
    kit = await make_kit(enforcer)
    token, address = await kit.agent()
    want = {"amount": "5", "token": "USDC", "chain": "base-local"}
    d = await kit.payments.submit("offer", token, {**pay_req(payee_wallet(), key="x1"), "want": want})
    assert (d.status, d.code) == ("blocked", "no_wallet") and "base-local" in d.reason
    assert kit.payment_txs(address) == [] and sink.messages == []
    base_wallet = "0x" + "ab" * 20
    d = await kit.payments.submit(
        "offer", token, {**pay_req(payee_wallet(), key="x2"), "want": want, "receive_wallet": base_wallet}
    )
    assert d.status == "paid_and_sent", d
    offer = parse(sink.messages[-1][2]).body
    assert offer is not None and offer["wallet"] == base_wallet and offer["want"]["chain"] == "base-local"


async def test_a_cap_near_two_to_the_63_refuses_alike_on_both_stores(enforcer: Enforcer) -> None:
    """A spend counter whose next increment would pass 2^63 refuses the take (held, as any
    cap reached) on SQLite and on PostgreSQL alike: never a store error."""
    kit = await make_kit(enforcer)
    await kit.agent()
    agent = await enforcer.store.agent_by_name("buyer")
    assert agent is not None
    top = 2**63 - 1
    store = kit.payments.store
    assert await store.take_spend(agent.id, "solana-local/USDC", "d", "2026-12-04", top - 3, top)
    assert not await store.take_spend(agent.id, "solana-local/USDC", "d", "2026-12-04", 10, top)
    assert await store.spent(agent.id, "solana-local/USDC", "d", "2026-12-04") == top - 3
    assert await store.take_spend(agent.id, "solana-local/USDC", "d", "2026-12-04", 3, top)
