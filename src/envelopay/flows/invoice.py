"""Invoice: INVOICE → PAY (two emails). The invoicer is the payee."""

from __future__ import annotations

from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A

TRANSITIONS: Table = (
    Row("start", Event.INVOICE, OUT, PAYEE, "invoiced", (A.RECORD_INVOICE,)),
    Row("invoiced", Event.PAY, IN, PAYEE, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.VERIFY_PROOF, A.NOTIFY)),
    Row("start", Event.INVOICE, IN, PAYER, "invoiced", (A.RECORD_INVOICE, A.NOTIFY)),
    Row("invoiced", Event.PAY, OUT, PAYER, "paid", (A.INVOICE_REF, A.INVOICE_TERMS, A.RECORD_PAYMENT)),
    *oops_rows(["invoiced", "paid"], back={("paid", PAYER): "invoiced"}),
)

KIND = FlowKind.INVOICE
