"""Pay: PAY → done (spec "Flows": one email). An unsolicited payment to our wallet."""

from __future__ import annotations

from envelopay.flows.core import Action as A
from envelopay.flows.core import (
    Direction,
    Event,
    FlowKind,
    FlowState,
    Row,
    Side,
    Step,
    Table,
    oops_rows,
    step_table,
)
from envelopay.protocol.messages import Message

IN, OUT = Direction.IN, Direction.OUT
PAYER, PAYEE = Side.PAYER, Side.PAYEE

TRANSITIONS: Table = (
    Row("start", Event.PAY, IN, PAYEE, "paid", (A.VERIFY_PROOF, A.NOTIFY)),
    Row("start", Event.PAY, OUT, PAYER, "paid", (A.RECORD_PAYMENT,)),
    Row("refused", Event.PAY, OUT, PAYER, "paid", (A.RECORD_PAYMENT,)),
    *oops_rows(["paid", "refused"], back={("paid", PAYER): "refused"}),
)

KIND = FlowKind.PAY


def step(fs: FlowState, message: Message, direction: Direction) -> Step:
    return step_table(TRANSITIONS, fs, message, direction)
