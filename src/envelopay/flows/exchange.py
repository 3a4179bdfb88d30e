"""Exchange: OFFER → ACCEPT (two emails, two on-chain transfers). The offerer (payer)
moves first; the accepter verifies the give leg, counter-pays, and ACCEPTs."""

from __future__ import annotations

from envelopay.flows.core import IN, OUT, PAYEE, PAYER, Event, FlowKind, Row, Table, oops_rows
from envelopay.flows.core import Action as A

TRANSITIONS: Table = (
    Row("start", Event.OFFER, IN, PAYEE, "offered", (A.RECORD_OFFER, A.VERIFY_PROOF, A.DECIDE_OFFER)),
    Row("offered", Event.ACCEPT, OUT, PAYEE, "accepted", (A.OFFER_REF, A.OFFER_TERMS, A.RECORD_PAYMENT)),
    Row("start", Event.OFFER, OUT, PAYER, "offered", (A.RECORD_OFFER, A.RECORD_PAYMENT)),
    Row("refused", Event.OFFER, OUT, PAYER, "offered", (A.RECORD_OFFER, A.RECORD_PAYMENT)),
    Row(
        "offered", Event.ACCEPT, IN, PAYER, "accepted", (A.OFFER_REF, A.OFFER_TERMS, A.VERIFY_PROOF, A.NOTIFY)
    ),
    # Their OOPS says our give leg went back (SPEC.md "Refunds"): `refunded` once the rail
    # shows the refund paid our wallet; else it is the plain OOPS (to `refused`).
    Row("offered", Event.REFUND, IN, PAYER, "refunded",
        (A.RECORD_REFUSAL, A.RECORD_REFUND, A.VERIFY_REFUND, A.NOTIFY)),
    Row("refunded", Event.OFFER, OUT, PAYER, "offered", (A.RECORD_OFFER, A.RECORD_PAYMENT)),
    # An OOPS answering the payment we just made: the offerer may send a new OFFER from
    # `refused`; the accepter is back at `offered`, where a new ACCEPT (proof) fits.
    *oops_rows(["offered", "accepted", "refused", "refunded"],
              back={("offered", PAYER): "refused", ("accepted", PAYEE): "offered"}),
)

KIND = FlowKind.EXCHANGE
