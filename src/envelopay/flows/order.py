"""Order work: ORDER → INVOICE → PAY → FULFILL (four emails); free work: ORDER → FULFILL
(two emails); a repeat customer simply opens a new order flow ("Skip negotiation")."""

from __future__ import annotations

from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A

TRANSITIONS: Table = (
    # payee: the worker
    Row("start", Event.ORDER, IN, PAYEE, "ordered", (A.RECORD_ORDER, A.DECIDE_ORDER)),
    Row("ordered", Event.INVOICE, OUT, PAYEE, "invoiced", (A.ORDER_REF, A.RECORD_INVOICE)),
    Row("ordered", Event.FULFILL, OUT, PAYEE, "fulfilled", (A.ORDER_REF,)),
    Row(
        "invoiced", Event.PAY, IN, PAYEE, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.VERIFY_PROOF, A.FULFILL)
    ),
    Row("paid", Event.FULFILL, OUT, PAYEE, "fulfilled", (A.ORDER_REF,)),
    # Our OOPS task_failed carries the refund we paid back, with its proof (SPEC.md
    # "Refunds"): the worker's flow says `refunded`, as the customer's does.
    Row("paid", Event.REFUND, OUT, PAYEE, "refunded", (A.RECORD_REFUND,)),
    # payer: the customer
    Row("start", Event.ORDER, OUT, PAYER, "ordered", (A.RECORD_ORDER,)),
    Row("ordered", Event.INVOICE, IN, PAYER, "invoiced", (A.ORDER_REF, A.RECORD_INVOICE, A.NOTIFY)),
    Row("ordered", Event.FULFILL, IN, PAYER, "fulfilled", (A.ORDER_REF, A.NOTIFY)),
    Row("invoiced", Event.PAY, OUT, PAYER, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.RECORD_PAYMENT)),
    # A FULFILL may say an overpayment's excess went back: checked on the rail, kept.
    Row("paid", Event.FULFILL, IN, PAYER, "fulfilled", (A.ORDER_REF, A.VERIFY_EXCESS, A.NOTIFY)),
    # Their OOPS says our payment went back (SPEC.md "Refunds"): `refunded` once the rail
    # shows the refund paid our wallet; else it is the plain OOPS (back to `invoiced`).
    Row("paid", Event.REFUND, IN, PAYER, "refunded",
        (A.RECORD_REFUSAL, A.RECORD_REFUND, A.VERIFY_REFUND, A.NOTIFY)),
    Row("refunded", Event.PAY, OUT, PAYER, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.RECORD_PAYMENT)),
    *oops_rows(["ordered", "invoiced", "paid", "fulfilled", "refunded"], back={("paid", PAYER): "invoiced"}),
)

KIND = FlowKind.ORDER
