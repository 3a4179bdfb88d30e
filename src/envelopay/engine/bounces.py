"""A bounce that came back, recorded against the outbox row it reports on.

The engine asks `bounce_of(raw)` of every inbound message before parsing it: a DSN is
the mail system talking, never protocol mail, and is never answered (RFC 3464 §6.2: no
DSN about a DSN, and no reply to a null sender). `record_bounce(store, dsn, local, now)`
then marks the reported outbox row `bounced` with the DSN's status code, and only when
the report is consistent with our own record: the returned Message-ID is one of
`local`'s outbox rows and one of the DSN's *failed* recipients is that row's recipient.
Anything else (a delay notice, a report about mail we never sent, a forged report
naming someone else) changes nothing and says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from envelopay.engine.outcome import Outcome
from envelopay.ledger.store import Store
from envelopay.mail.dsn import Dsn, parse_dsn

__all__ = ["BounceOutcome", "bounce_of", "bounce_outcome", "record_bounce"]

BounceVerdict = Literal["bounced", "already", "delayed", "unknown_message", "recipient_mismatch"]


@dataclass(frozen=True, slots=True)
class BounceOutcome:
    verdict: BounceVerdict
    message_id: str | None  # the outbox row the DSN names (when it names one)
    status: str | None = None  # the DSN's status code for our recipient
    detail: str = ""


def bounce_of(raw: bytes) -> Dsn | None:
    """The DSN `raw` carries, or None when it is not a delivery-status report."""
    return parse_dsn(raw)


def record_bounce(store: Store, dsn: Dsn, local: str, now: datetime) -> BounceOutcome:
    mid = dsn.original_message_id
    if not dsn.failed:
        # RFC 3464 "delayed": the mail system is still trying; the row stays as it is.
        first = dsn.recipients[0]
        return BounceOutcome("delayed", mid, first.status, f"{first.action} {first.status}")
    row = store.outbox_get(mid) if mid is not None else None
    if row is None or row.outbound.sender.lower() != local.lower():
        return BounceOutcome("unknown_message", mid, dsn.failed[0].status, "no outbox row of ours")
    recipient = row.outbound.recipient.lower()
    match = next(
        (r for r in dsn.failed if recipient in (r.final_recipient, r.original_recipient)), None
    )
    if match is None:
        return BounceOutcome("recipient_mismatch", mid, dsn.failed[0].status,
                             f"the DSN reports {[r.final_recipient for r in dsn.failed]}, not {recipient}")
    detail = match.diagnostic or f"{match.action} {match.status}"
    if not store.mark_bounced(row.outbound.message_id, now, match.status, detail):
        return BounceOutcome("already", mid, match.status, "already recorded")
    return BounceOutcome("bounced", mid, match.status, detail)


def bounce_outcome(store: Store, dsn: Dsn, local: str, now: datetime) -> Outcome:
    """The inbound step for a DSN: record it, answer nothing ("ignored")."""
    got = record_bounce(store, dsn, local, now)
    verdict = {"bounce": got.verdict, "outbox": got.message_id, "status": got.status}
    return Outcome("ignored", dsn.message_id, detail=f"DSN: {got.verdict} ({got.detail})"[:500],
                   verdict=verdict)
