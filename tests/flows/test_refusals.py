"""An OOPS answering our own PAY, OFFER or ACCEPT (issue 15): the flow goes back to a
state that accepts an honest retry, and keeps what was paid under `refused`."""

from __future__ import annotations

import pytest

from envelopay import flows
from envelopay.flows import Direction, FlowKind, FlowState, Side
from envelopay.protocol.messages import (
    Accept,
    Give,
    Invoice,
    Message,
    Offer,
    Oops,
    OopsError,
    Order,
    Pay,
    Want,
)

IN, OUT = Direction.IN, Direction.OUT
INVOICE = Invoice(id="inv_1", amount=100, token="T", chain="c", wallet="W", order_ref="ord_1")
BAD = Pay(id="pay_1", amount=100, token="T", chain="c", proof={"tx": "wrong"}, invoice_ref="inv_1")
GOOD = Pay(id="pay_2", amount=100, token="T", chain="c", proof={"tx": "right"}, invoice_ref="inv_1")
OFFER = Offer(id="ofr_1", give=Give(amount=1, token="SOL", chain="c", to="W", proof={"tx": "g"}),
              want=Want(amount=5, token="USDC", chain="b"), wallet="Wo")
OOPS = Oops(note="paid the wrong wallet", ref="pay_1", error=OopsError(code="recipient_mismatch"))


def _walk(fs: FlowState, moves: list[tuple[Message, Direction]]) -> FlowState:
    for message, direction in moves:
        step = flows.step(fs, message, direction)
        assert step.ok, (fs.state, message.type, direction, step.detail)
        fs = FlowState(fs.kind, fs.side, step.state, step.data)
    return fs


@pytest.mark.parametrize("kind", [FlowKind.ORDER, FlowKind.FIRST_CONTACT])
def test_refused_pay_returns_to_invoiced_and_an_honest_retry_fits(kind: FlowKind) -> None:
    start = "quoted" if kind is FlowKind.FIRST_CONTACT else "start"
    fs = FlowState(kind, Side.PAYER, start)
    fs = _walk(fs, [(Order(id="ord_1", task={"op": "x"}), OUT), (INVOICE, IN), (BAD, OUT)])
    assert fs.state == "paid" and fs.data["payment"]["proof"] == {"tx": "wrong"}
    fs = _walk(fs, [(OOPS, IN)])
    assert fs.state == "invoiced"
    assert "payment" not in fs.data
    assert fs.data["refused"] == [{"message": "pay", "id": "pay_1", "chain": "c", "token": "T",
                                   "amount": "100", "to": "W",  # the INVOICE's wallet: where it went
                                   "proof": {"tx": "wrong"}, "oops": "recipient_mismatch",
                                   "note": "paid the wrong wallet"}]
    fs = _walk(fs, [(GOOD, OUT)])
    assert fs.state == "paid" and len(fs.data["refused"]) == 1


def test_invoice_flow_payer_rolls_back_too() -> None:
    fs = _walk(FlowState(FlowKind.INVOICE, Side.PAYER), [(INVOICE, IN), (BAD, OUT), (OOPS, IN)])
    assert fs.state == "invoiced" and fs.data["refused"][0]["id"] == "pay_1"


def test_an_oops_before_any_payment_changes_nothing() -> None:
    order = Order(id="ord_1", task={"op": "x"})
    fs = _walk(FlowState(FlowKind.ORDER, Side.PAYER), [(order, OUT), (OOPS, IN)])
    assert fs.state == "ordered" and "refused" not in fs.data


def test_refused_offer_records_the_give_leg_and_allows_a_new_offer() -> None:
    fs = _walk(FlowState(FlowKind.EXCHANGE, Side.PAYER), [(OFFER, OUT), (OOPS, IN)])
    assert fs.state == "refused"
    assert fs.data["refused"][0]["to"] == "W" and fs.data["refused"][0]["amount"] == "1"
    assert _walk(fs, [(OFFER, OUT)]).state == "offered"


def test_an_oops_after_our_accept_returns_the_accepter_to_offered() -> None:
    """The accepter's (payee's) ACCEPT answered by OOPS: back to `offered` with the ACCEPT's
    payment under `refused`, so a new ACCEPT (a new proof) may go; the OFFER stays on record."""
    acc = Accept(id="acc_1", offer_ref="ofr_1", amount=5, token="USDC", chain="b", proof={"tx": "a"})
    fs = _walk(FlowState(FlowKind.EXCHANGE, Side.PAYEE), [(OFFER, IN), (acc, OUT)])
    assert fs.state == "accepted" and fs.data["payment"]["message"] == "accept"
    fs = _walk(fs, [(OOPS, IN)])
    assert fs.state == "offered" and "payment" not in fs.data and fs.data["offer"]["id"] == "ofr_1"
    assert fs.data["refused"] == [{"message": "accept", "id": "acc_1", "chain": "b", "token": "USDC",
                                   "amount": "5", "to": "Wo",  # the OFFER's wallet
                                   "proof": {"tx": "a"}, "oops": "recipient_mismatch",
                                   "note": "paid the wrong wallet"}]
    again = acc.model_copy(update={"id": "acc_2", "proof": {"tx": "b"}})
    fs = _walk(fs, [(again, OUT)])
    assert fs.state == "accepted" and fs.data["payment"]["id"] == "acc_2" and len(fs.data["refused"]) == 1


def test_the_offerer_refusing_an_accept_stays_offered_for_the_retry() -> None:
    """The other side of the same refusal: the offerer's flow is unchanged by its own
    OOPS, so the accepter's new ACCEPT fits there too."""
    acc = Accept(id="acc_2", offer_ref="ofr_1", amount=5, token="USDC", chain="b", proof={"tx": "b"})
    fs = _walk(FlowState(FlowKind.EXCHANGE, Side.PAYER), [(OFFER, OUT), (OOPS, OUT)])
    assert fs.state == "offered"
    assert _walk(fs, [(acc, IN)]).state == "accepted"


def test_an_oops_after_a_prepaid_order_keeps_the_payment_and_allows_a_new_one() -> None:
    paid = Order(v="0.2.0", id="ord_p1", task={"op": "x"}, amount=100, token="T", chain="c",
                 proof={"tx": "p1"})
    fs = _walk(FlowState(FlowKind.PREPAID, Side.PAYER), [(paid, OUT)])
    assert fs.data["payment"] == {"message": "order", "id": "ord_p1", "chain": "c", "token": "T",
                                  "amount": "100", "proof": {"tx": "p1"}}
    fs = _walk(fs, [(OOPS, IN)])
    assert fs.state == "refused" and fs.data["refused"][0]["id"] == "ord_p1"
    fs = _walk(fs, [(paid.model_copy(update={"id": "ord_p2", "proof": {"tx": "p2"}}), OUT)])
    assert fs.state == "prepaid" and fs.data["payment"]["id"] == "ord_p2"


def test_the_payee_side_of_a_refused_payment_is_unchanged() -> None:
    """The worker that refused a PAY (its OOPS out) keeps its INVOICE open: the retry fits."""
    order = Order(id="ord_1", task={"op": "x"})
    fs = _walk(FlowState(FlowKind.ORDER, Side.PAYEE), [(order, IN), (INVOICE, OUT), (OOPS, OUT)])
    assert fs.state == "invoiced"
    assert _walk(fs, [(GOOD, IN)]).state == "paid"


def test_refused_standalone_pay_can_be_paid_again() -> None:
    fs = _walk(FlowState(FlowKind.PAY, Side.PAYER), [(BAD, OUT), (OOPS, IN)])
    assert fs.state == "refused"
    assert _walk(fs, [(GOOD, OUT)]).state == "paid"
