"""`pay --invoice ID --override` never pays what its own flow cannot send (seen on a new-user
walk: `pay --invoice … --amount 100000 --override` paid 0.1 USDC on the chain, then the
engine refused the PAY as `amount_mismatch` — exit 2, no PAY sent, no record of the money).
The preflight refuses, before anything moves, exactly what the order flow's table refuses
of an outgoing PAY; another wallet, or more than asked, still goes."""

from __future__ import annotations

import pytest

from envelopay import flows
from envelopay.client.preflight import sendable_override
from envelopay.errors import UsageError
from envelopay.flows import Direction, FlowKind, FlowState, Side
from envelopay.protocol.messages import Pay

ASKED = {"amount": "250000", "token": "USDC", "chain": "solana-local", "wallet": "W"}
INVOICE = {"id": "inv_1", **ASKED}


def _flow_sends(terms: dict[str, str]) -> bool:
    """What the engine's own table says of this PAY, as it leaves."""
    fs = FlowState(FlowKind.ORDER, Side.PAYER, "invoiced", {"invoice": INVOICE, "order": {"id": "ord_1"}})
    pay = Pay(id="pay_1", amount=int(terms["amount"]), token=terms["token"], chain=terms["chain"],
              proof={"tx": "t"}, invoice_ref="inv_1")
    return flows.step(fs, pay, Direction.OUT).ok


@pytest.mark.parametrize(("override", "flag"), [
    ({"amount": "100000"}, "--amount"), ({"amount": "249999"}, "--amount"),
    ({"token": "SOL"}, "--token"), ({"chain": "base-local"}, "--chain"),
    ({"amount": "250000"}, None), ({"amount": "300000"}, None), ({"wallet": "OTHER"}, None),
])
def test_an_override_is_refused_before_paying_exactly_when_the_flow_would_refuse_the_pay(
    override: dict[str, str], flag: str | None
) -> None:
    terms = {**ASKED, **override}
    assert _flow_sends(terms) is (flag is None)
    if flag is None:
        sendable_override("inv_1", ASKED, terms)
        return
    with pytest.raises(UsageError, match=f"^{flag}: .*even with --override \\(nothing paid\\)"):
        sendable_override("inv_1", ASKED, terms)
