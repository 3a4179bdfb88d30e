"""An outbound protocol message before it becomes bytes: what the outbox stores, what
the enforcer receives, what `compose` turns into RFC 5322. Headers are fixed here
(Message-ID, Date) so a resend of the same row is recognisably the same mail."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from envelopay.protocol.autosubmit import AutoSubmitted
from envelopay.protocol.messages import Message


@dataclass(frozen=True, slots=True)
class Outbound:
    sender: str  # bare address, e.g. "worker@garden.local"
    recipient: str  # exactly one bare address
    message: Message
    message_id: str  # "<...@domain>", fixed at write time
    date: datetime  # timezone-aware, fixed at write time
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    note: str | None = None  # subject note; defaults to message.note
    # RFC 3834 §5: the Auto-Submitted field this mail carries; None for mail a person
    # asked for (SPEC.md "Automatic answers (RFC 3834)").
    auto_submitted: AutoSubmitted | None = None
