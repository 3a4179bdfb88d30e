"""The offerer's side of a refunded give leg in the exchange table (pure): an OOPS with a
refund answering our OFFER leads to `refunded` (the engine then checks it on the rail),
keeping the give leg it undid under `refused`; read as a plain OOPS it goes to `refused`;
from `refunded` a new OFFER may go. The accepter's side takes no REFUND event."""

from __future__ import annotations

from envelopay import flows
from envelopay.flows import Direction, FlowKind, FlowState, Side
from envelopay.flows.core import Action
from envelopay.protocol.messages import Give, Offer, Oops, OopsError, Want

REFUND = {"chain": "solana-local", "token": "SOL", "amount": "1000000000", "wallet": "B",
          "proof": {"tx": "t"}, "reason": "offer_refused"}
GIVE = {"payment": {"message": "offer", "id": "of1", "chain": "solana-local", "token": "SOL",
                    "amount": "1000000000"}}


def _oops() -> Oops:
    return Oops(note="amount_mismatch", error=OopsError(code="amount_mismatch", refund=REFUND))


def test_the_offerer_is_refunded_keeps_the_give_leg_it_undid_and_may_offer_again() -> None:
    fs = FlowState(FlowKind.EXCHANGE, Side.PAYER, "offered", GIVE)
    step = flows.step(fs, _oops(), Direction.IN)
    assert step.ok and step.state == "refunded" and Action.VERIFY_REFUND in step.actions
    assert step.data["refund"] == REFUND and step.data["refused"][0]["id"] == "of1"
    plain = flows.step(fs, _oops(), Direction.IN, flows.Event.OOPS)  # the rail did not show it
    assert plain.ok and plain.state == "refused" and Action.VERIFY_REFUND not in plain.actions
    give = Give(amount=10**9, token="SOL", chain="solana-local", to="W", proof={"tx": "u"})
    again = Offer(id="of2", give=give, want=Want(amount=1, token="USDC", chain="base-local"), wallet="B")
    out = flows.step(FlowState(FlowKind.EXCHANGE, Side.PAYER, "refunded", step.data), again, Direction.OUT)
    assert out.ok and out.state == "offered"


def test_the_accepter_takes_no_refund_event() -> None:
    fs = FlowState(FlowKind.EXCHANGE, Side.PAYEE, "offered", {})
    step = flows.step(fs, _oops(), Direction.IN)
    assert step.state == "offered" and Action.VERIFY_REFUND not in step.actions
