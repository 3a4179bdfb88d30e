"""First contact: WHICH → METHODS → ORDER → INVOICE → PAY → FULFILL (six emails).

After METHODS the conversation continues as the order flow (or a v0.2 prepaid order);
those rows are the order and prepaid tables with their start state renamed "quoted"."""

from __future__ import annotations

from envelopay.flows import order, prepaid
from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A


def _after_quote(table: Table) -> tuple[Row, ...]:
    return tuple(
        Row("quoted" if r.state == "start" else r.state, r.event, r.direction, r.side, r.new_state, r.actions)
        for r in table
        if r.event is not Event.OOPS or r.state != "start"
    )


TRANSITIONS: Table = (
    Row("start", Event.WHICH, IN, PAYEE, "asked", (A.RECORD_WHICH, A.DECIDE_METHODS)),
    Row("asked", Event.METHODS, OUT, PAYEE, "quoted", (A.WHICH_REF, A.RECORD_METHODS)),
    Row("start", Event.WHICH, OUT, PAYER, "asked", (A.RECORD_WHICH,)),
    Row("asked", Event.METHODS, IN, PAYER, "quoted", (A.WHICH_REF, A.RECORD_METHODS, A.NOTIFY)),
    *oops_rows(["asked", "quoted"]),
    *_after_quote(order.TRANSITIONS),
    # States both tables have (fulfilled, refunded) take their OOPS rows from the order table.
    *(r for r in _after_quote(prepaid.TRANSITIONS)
      if not (r.event is Event.OOPS and r.state in ("fulfilled", "refunded"))),
)

KIND = FlowKind.FIRST_CONTACT
