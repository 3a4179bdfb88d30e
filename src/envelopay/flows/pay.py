"""Pay: PAY → done (spec "Flows": one email). An unsolicited payment to our wallet."""

from __future__ import annotations

from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A

TRANSITIONS: Table = (
    Row("start", Event.PAY, IN, PAYEE, "paid", (A.VERIFY_PROOF, A.NOTIFY)),
    Row("start", Event.PAY, OUT, PAYER, "paid", (A.RECORD_PAYMENT,)),
    Row("refused", Event.PAY, OUT, PAYER, "paid", (A.RECORD_PAYMENT,)),
    *oops_rows(["paid", "refused"], back={("paid", PAYER): "refused"}),
)

KIND = FlowKind.PAY
