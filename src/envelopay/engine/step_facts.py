"""The facts a step records and reads beside its state change: its working state (`Work`),
log lines, flow facts (an INVOICE's issue time), the references a message carries.

Shared by the inbound path (envelopay.engine.inbound) and the outbound send
(envelopay.engine.send), so both record a message the same way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from envelopay.engine.application import Notice
from envelopay.flows import FlowState
from envelopay.ledger.jobs import Job
from envelopay.ledger.store import LogEntry
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import reply_headers as compose_reply_headers
from envelopay.protocol.messages import Invoice, Message, Offer, Oops, Order
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parsed import Parsed
from envelopay.rails.interface import Verdict

__all__ = [
    "INVOICE_ISSUED_AT",
    "INVOICE_SKEW",
    "MAX_CONFLICT_RETRIES",
    "REF_FIELDS",
    "Work",
    "content_hash",
    "order_of",
    "out_entry",
    "proof_of",
    "reply_headers",
    "stamp_invoice",
    "typed_refs",
]

# A PAY against an INVOICE must carry a transfer made after the INVOICE (see
# envelopay.engine.verify.not_before); this much drift between our clock and the chain's is allowed.
INVOICE_SKEW = timedelta(minutes=10)
INVOICE_ISSUED_AT = "invoice_issued_at"  # flow fact, ISO 8601, written when we send an INVOICE
REF_FIELDS = ("order_ref", "invoice_ref", "offer_ref", "which_ref")
MAX_CONFLICT_RETRIES = 8


@dataclass(slots=True)
class Work:
    """The mutable result of one inbound step, before the commit."""

    fs: FlowState
    flow_id: str
    version: int
    peer: str
    replies: list[Outbound] = field(default_factory=list)
    log: list[LogEntry] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    verdict: Verdict | None = None
    proof_fate: Literal["spend", "release"] | None = None
    replay_fate: Literal["done", "release"] = "done"
    oops: OopsCode | None = None
    detail: str = ""
    persist: bool = True
    start: FlowState | None = None  # the flow as read, to skip a write that changes nothing
    oops_extra: Mapping[str, Any] | None = None  # extension fields of the OOPS (a refund)
    job: Job | None = None  # work taken on as a job: written with this step's commit
    # The refund an OOPS cites is a transfer already spent (another flow's refund, a PAY):
    # it is not believed, and the OOPS reads as the plain one (engine/refund_check.py).
    refund_replayed: bool = False
    # The mail's own list (InboundMail.verify_seconds), which engine/verify.py timed_verify
    # appends to: the (chain, seconds) of each rail verification, for worker serve's metrics.
    verify_seconds: list[tuple[str, float]] = field(default_factory=list)


def content_hash(parsed: Parsed) -> str:
    """The identity of a message's protocol content: its type and body, canonically."""
    doc = {"type": parsed.type.value if parsed.type else None, "body": parsed.body}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def typed_refs(message: Message) -> tuple[str, ...]:
    """The protocol ids a message names in its typed refs (and an OOPS's `ref`)."""
    refs = [getattr(message, f, None) for f in REF_FIELDS]
    if isinstance(message, Oops):
        refs.append(message.ref)
    return tuple(r for r in refs if isinstance(r, str))


def out_entry(flow_id: str, ob: Outbound, now: datetime) -> LogEntry:
    """The flow log's line for a message we send."""
    oops = ob.message.error.code if isinstance(ob.message, Oops) and ob.message.error else None
    return LogEntry(
        flow_id,
        now,
        "out",
        ob.message.type,
        ob.message_id,
        getattr(ob.message, "id", None),
        ob.sender,
        ob.recipient,
        ob.message.model_dump(mode="json"),
        oops=oops,
    )


def stamp_invoice(message: Message, data: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Flow facts after sending `message`; an INVOICE records when it was issued."""
    out = dict(data)
    if isinstance(message, Invoice):
        out[INVOICE_ISSUED_AT] = now.isoformat()
    return out


def reply_headers(parsed: Parsed) -> tuple[str | None, tuple[str, ...]]:
    return compose_reply_headers(parsed)


def proof_of(message: Message) -> tuple[str, dict[str, Any]]:
    if isinstance(message, Offer):
        return message.give.chain, message.give.proof
    chain = getattr(message, "chain", None)
    proof = getattr(message, "proof", None)
    assert isinstance(chain, str) and isinstance(proof, dict)
    return chain, proof


def order_of(data: Mapping[str, Any]) -> Order | None:
    body = data.get("order")
    if not isinstance(body, Mapping):
        return None
    return Order.model_validate(dict(body), strict=False)
