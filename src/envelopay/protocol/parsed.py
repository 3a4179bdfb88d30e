"""The value `parse()` returns: everything a receiver needs, never an exception."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, MessageType


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a message: a code, the field it concerns, and a detail."""

    code: OopsCode
    detail: str
    field: str | None = None


@dataclass(frozen=True, slots=True)
class Parsed:
    """Result of parsing one raw message.

    protocol  -- the subject speaks Envelopay (a keyword-shaped subject, known or not)
    type      -- the subject's keyword when it is one of the nine, else None
    message   -- the validated body model (a bare WHICH gets a default `Which()`)
    valid     -- a receiver can act on it
    oops      -- the code a receiver answers with; None when it answers nothing
    """

    protocol: bool
    type: MessageType | None
    valid: bool
    oops: OopsCode | None
    message: Message | None = None
    body: dict[str, Any] | None = None
    subject: str | None = None
    note: str | None = None
    message_id: str | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    from_addr: str | None = None
    to_addrs: tuple[str, ...] = ()
    x_envelopay_type: str | None = None
    problems: tuple[Problem, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())
    # Why no single sender could be read (two From fields, several mailboxes, none).
    from_problem: str | None = None
    # An RFC 3834 signal that this mail must get no automatic answer (protocol.autosubmit).
    no_answer: str | None = None

    @property
    def id(self) -> str | None:
        """The sender's protocol `id`, when the body carries one."""
        if self.message is not None:
            ident = getattr(self.message, "id", None)
            return ident if isinstance(ident, str) else None
        if self.body is not None and isinstance(self.body.get("id"), str):
            return str(self.body["id"])
        return None

    def to_json(self) -> dict[str, Any]:
        """The `envelopay parse --json` object. The first seven keys are fixed by the
        conformance manifest format (SPEC.md); the rest are informative."""
        return {
            "protocol": self.protocol,
            "type": self.type.value if self.type is not None else None,
            "valid": self.valid,
            "oops": self.oops.value if self.oops is not None else None,
            "id": self.id,
            "message_id": self.message_id,
            "body": self.body,
            "note": self.note,
            "subject": self.subject,
            "from": self.from_addr,
            "in_reply_to": self.in_reply_to,
            "references": list(self.references),
            "problems": [
                {"code": p.code.value, "field": p.field, "detail": p.detail} for p in self.problems
            ],
            "warnings": list(self.warnings),
        }
