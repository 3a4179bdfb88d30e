"""One inbound message as the engine knows it, built once and passed whole.

What used to travel as long argument lists (the parse, its Message-ID or the raw bytes'
fallback id, the sender, the DKIM verdict and the label recorded with the outcome) is
read here once; the decision step (engine/decide.py), the refusals and the status desk
all take this record. The DKIM label rides here, not in a context variable, so it can
never leak from one message to the next; so do the timings of the rail verifications made
for this message (`verify_seconds`), which the engine hands back on its Outcome.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

from envelopay.dkim import DkimResult
from envelopay.engine.alignment import dkim_label
from envelopay.engine.poison import clean_parsed
from envelopay.protocol.messages import Message
from envelopay.protocol.parsed import Parsed

__all__ = ["InboundMail", "fallback_id"]


def fallback_id(raw: bytes) -> str:
    """The Message-ID a message without a usable one is keyed by: its bytes' hash."""
    return f"<sha256.{hashlib.sha256(raw).hexdigest()[:40]}@unidentified>"


@dataclass(frozen=True, slots=True)
class InboundMail:
    """`parsed` is already cleaned (engine/poison.py clean_parsed); `message_id` is its
    Message-ID or the fallback; `sender` its From, lowercased, when it has one sender."""

    parsed: Parsed
    message_id: str | None
    sender: str | None
    raw: bytes | None = None  # lets a proof that is not final yet wait in the ledger
    dkim: DkimResult | None = None
    dkim_label: str | None = None  # recorded with the outcome, once the DKIM gate is passed
    fallback_message_id: str | None = None
    # (chain, seconds) of each rail.verify made while handling this mail (engine/verify.py
    # timed_verify, through the step's Work): one list per message, shared by the records
    # `reread` and `labelled` make and by every attempt of its step, so a retried step or
    # a quarantined one still reports the calls it made. Not part of the record's identity.
    verify_seconds: list[tuple[str, float]] = field(default_factory=list, compare=False)

    @classmethod
    def of(
        cls, parsed: Parsed, *, dkim: DkimResult | None, fallback_message_id: str | None, raw: bytes | None
    ) -> InboundMail:
        parsed = clean_parsed(parsed, fallback_message_id)
        sender = parsed.from_addr.lower() if parsed.from_addr else None
        return cls(
            parsed, parsed.message_id or fallback_message_id, sender, raw, dkim, None, fallback_message_id
        )

    def reread(self, parsed: Parsed) -> InboundMail:
        """The same mail read again (a person's reply in our thread, parsed by its JSON)."""
        return replace(self, parsed=clean_parsed(parsed, self.fallback_message_id))

    def labelled(self) -> InboundMail:
        """The mail with its DKIM label, recorded from here on with every outcome."""
        return replace(self, dkim_label=dkim_label(self.dkim, self.sender))

    @property
    def protocol_id(self) -> str | None:
        return self.parsed.id

    @property
    def message(self) -> Message | None:
        """The protocol message, when the parse is valid."""
        return self.parsed.message if self.parsed.valid else None

    @property
    def thread(self) -> tuple[str, ...]:
        """The ids this mail names as its thread: In-Reply-To, then References newest first."""
        ids: list[str] = []
        if self.parsed.in_reply_to:
            ids.append(self.parsed.in_reply_to)
        ids.extend(r for r in reversed(self.parsed.references) if r not in ids)
        return tuple(ids)
