"""Invoice: INVOICE → PAY (two emails). The invoicer is the payee."""

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
    Row("start", Event.INVOICE, OUT, PAYEE, "invoiced", (A.RECORD_INVOICE,)),
    Row("invoiced", Event.PAY, IN, PAYEE, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.VERIFY_PROOF, A.NOTIFY)),
    Row("start", Event.INVOICE, IN, PAYER, "invoiced", (A.RECORD_INVOICE, A.NOTIFY)),
    Row("invoiced", Event.PAY, OUT, PAYER, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.RECORD_PAYMENT)),
    *oops_rows(["invoiced", "paid"], back={("paid", PAYER): "invoiced"}),
)

KIND = FlowKind.INVOICE


def step(fs: FlowState, message: Message, direction: Direction) -> Step:
    return step_table(TRANSITIONS, fs, message, direction)
