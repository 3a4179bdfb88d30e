"""Prepaid order (v0.2.0): an ORDER carrying amount, token, chain and proof → FULFILL.
The proof is verified before the application is asked; it answers FULFILL or refuses."""

from __future__ import annotations

from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A

TRANSITIONS: Table = (
    Row("start", Event.ORDER_PREPAID, IN, PAYEE, "prepaid", (A.RECORD_ORDER, A.VERIFY_PROOF, A.DECIDE_ORDER)),
    Row("prepaid", Event.FULFILL, OUT, PAYEE, "fulfilled", (A.ORDER_REF,)),
    # Our OOPS task_failed carries the refund we paid back (SPEC.md "Refunds"): `refunded`.
    Row("prepaid", Event.REFUND, OUT, PAYEE, "refunded", (A.RECORD_REFUND,)),
    Row("start", Event.ORDER_PREPAID, OUT, PAYER, "prepaid", (A.RECORD_ORDER, A.RECORD_PAYMENT)),
    Row("refused", Event.ORDER_PREPAID, OUT, PAYER, "prepaid", (A.RECORD_ORDER, A.RECORD_PAYMENT)),
    Row("prepaid", Event.FULFILL, IN, PAYER, "fulfilled", (A.ORDER_REF, A.VERIFY_EXCESS, A.NOTIFY)),
    # Their OOPS says our payment went back (SPEC.md "Refunds"), checked on the rail.
    Row("prepaid", Event.REFUND, IN, PAYER, "refunded",
        (A.RECORD_REFUSAL, A.RECORD_REFUND, A.VERIFY_REFUND, A.NOTIFY)),
    Row("refunded", Event.ORDER_PREPAID, OUT, PAYER, "prepaid", (A.RECORD_ORDER, A.RECORD_PAYMENT)),
    # An OOPS answering our paid ORDER: kept under `refused`, and a new one may go.
    *oops_rows(["prepaid", "fulfilled", "refused", "refunded"], back={("prepaid", PAYER): "refused"}),
)

KIND = FlowKind.PREPAID
