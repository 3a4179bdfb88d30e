"""The PAY through the outbound seam's MockTransport (envelopay.testing): the early envelope
opens before the payment is signed, the PAY goes once with its proof, and a recipient the
next hop refuses for good is heard before any money moves — on both stores and LiteSVM."""

from __future__ import annotations

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.policy import SpendLimit
from envelopay.protocol.parse import parse
from envelopay.testing import MockTransport

from .conftest import Clock
from .paykit import USDC, make_kit, pay_req, payee_wallet, proof_tx

SELLER = "seller@partner.test"


async def test_a_pay_goes_once_through_the_mock_with_its_proof(store: EnforcerStore, clock: Clock) -> None:
    mock = MockTransport()
    kit = await make_kit(Enforcer(store, mock, clock=clock))
    token, address = await kit.agent()
    done = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, to=SELLER))
    assert done.status == "paid_and_sent", done
    [pay] = mock.to(SELLER)
    assert parse(pay).message_id == done.message_id
    assert proof_tx((parse(pay).body or {}).get("proof")) == done.tx_id
    assert kit.payment_txs(address) == [done.tx_id]


async def test_a_pay_the_next_hop_refuses_moves_no_money(store: EnforcerStore, clock: Clock) -> None:
    mock = MockTransport(refuse=[SELLER])
    kit = await make_kit(Enforcer(store, mock, clock=clock))
    token, address = await kit.agent(limit=SpendLimit(per_payment=USDC, hourly=USDC, daily=USDC))
    before = kit.usdc_of(address)
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, to=SELLER))
    # The refusal came at stage(), while the payment was being signed: nothing was sent.
    assert (d.status, d.code) == ("failed", "pay_mail_refused"), d
    assert "no such mailbox" in d.reason
    assert d.tx_id is None and kit.payment_txs(address) == [] and kit.usdc_of(address) == before
    assert mock.sent == []
