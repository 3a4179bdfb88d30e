"""Prepaid order (v0.2.0): an ORDER carrying amount, token, chain and proof → FULFILL.
The proof is verified before the application is asked; it answers FULFILL or refuses."""

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
    Row("start", Event.ORDER_PREPAID, IN, PAYEE, "prepaid", (A.RECORD_ORDER, A.VERIFY_PROOF, A.DECIDE_ORDER)),
    Row("prepaid", Event.FULFILL, OUT, PAYEE, "fulfilled", (A.ORDER_REF,)),
    Row("start", Event.ORDER_PREPAID, OUT, PAYER, "prepaid", (A.RECORD_ORDER, A.RECORD_PAYMENT)),
    Row("refused", Event.ORDER_PREPAID, OUT, PAYER, "prepaid", (A.RECORD_ORDER, A.RECORD_PAYMENT)),
    Row("prepaid", Event.FULFILL, IN, PAYER, "fulfilled", (A.ORDER_REF, A.NOTIFY)),
    # An OOPS answering our paid ORDER: kept under `refused`, and a new one may go.
    *oops_rows(["prepaid", "fulfilled", "refused"], back={("prepaid", PAYER): "refused"}),
)

KIND = FlowKind.PREPAID


def step(fs: FlowState, message: Message, direction: Direction) -> Step:
    return step_table(TRANSITIONS, fs, message, direction)
