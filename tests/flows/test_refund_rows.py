"""The payer's side of a refund in the flow tables (pure): an OOPS whose error carries a
refund with a proof is the REFUND event; in an order or prepaid flow whose payment it
answers it leads to `refunded` (the engine then checks it on the rail), elsewhere it is
the plain OOPS it also is; read as a plain OOPS it goes where OOPS goes."""

from __future__ import annotations

from envelopay import flows
from envelopay.flows import Direction, Event, FlowKind, FlowState, Side
from envelopay.flows.core import Action, event_of, refund_of
from envelopay.protocol.messages import Oops, OopsError

REFUND = {"chain": "solana-local", "token": "USDC", "amount": "250000", "wallet": "W", "proof": {"tx": "t"}}
PAID = {"payment": {"message": "pay", "id": "p1", "chain": "solana-local", "token": "USDC",
                    "amount": "250000"}}


def _oops(**error: object) -> Oops:
    return Oops(note="task_failed", error=OopsError(code="task_failed", **error))


def test_an_oops_with_a_refund_is_the_refund_event_and_one_without_a_proof_is_not() -> None:
    assert event_of(_oops(refund=REFUND)) is Event.REFUND
    assert refund_of(_oops(refund=REFUND)) == REFUND
    assert event_of(_oops(refund={**REFUND, "proof": None})) is Event.OOPS
    assert event_of(_oops(refund={**REFUND, "amount": "-1"})) is Event.OOPS
    assert event_of(_oops()) is Event.OOPS


def test_the_payer_of_an_order_is_refunded_and_keeps_the_payment_it_undid() -> None:
    fs = FlowState(FlowKind.ORDER, Side.PAYER, "paid", PAID)
    step = flows.step(fs, _oops(refund=REFUND), Direction.IN)
    assert step.ok and step.state == "refunded"
    assert Action.VERIFY_REFUND in step.actions
    assert step.data["refund"] == REFUND and step.data["refused"][0]["id"] == "p1"
    plain = flows.step(fs, _oops(refund=REFUND), Direction.IN, Event.OOPS)  # the rail did not show it
    assert plain.ok and plain.state == "invoiced" and Action.VERIFY_REFUND not in plain.actions


def test_a_refund_where_no_row_names_it_is_the_plain_oops() -> None:
    for kind, state, side in ((FlowKind.ORDER, "invoiced", Side.PAYEE), (FlowKind.PAY, "start", Side.PAYER),
                              (FlowKind.ORDER, "fulfilled", Side.PAYER)):
        fs = FlowState(kind, side, state, {})
        step = flows.step(fs, _oops(refund=REFUND), Direction.IN)
        assert step.state == fs.state and Action.VERIFY_REFUND not in step.actions


def test_a_prepaid_payer_is_refunded_and_may_order_again() -> None:
    fs = FlowState(FlowKind.PREPAID, Side.PAYER, "prepaid", PAID)
    step = flows.step(fs, _oops(refund=REFUND), Direction.IN)
    assert step.ok and step.state == "refunded"


def test_the_payee_whose_oops_carries_a_paid_refund_says_refunded() -> None:
    """Walk item 4: the worker's flow, not only the customer's, reads `refunded`."""
    for kind, state in ((FlowKind.ORDER, "paid"), (FlowKind.PREPAID, "prepaid")):
        fs = FlowState(kind, Side.PAYEE, state, {})
        step = flows.step(fs, _oops(refund=REFUND), Direction.OUT)
        assert step.ok and step.state == "refunded" and step.data["refund"] == REFUND
        pending = flows.step(fs, _oops(refund={**REFUND, "proof": None}), Direction.OUT)
        assert pending.ok and pending.state == state  # still being paid: the plain OOPS
