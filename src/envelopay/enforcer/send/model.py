"""Values that cross the enforcer's boundary: send requests, dispositions, agents, queue rows.

A disposition is a *result*: every policy verdict (including refusals) is one of these,
never an exception. Only transport and configuration faults are exceptions.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from envelopay.enforcer.common.wire import Decided, Verdict

DispositionStatus = Literal["sent", "pending_approval", "blocked", "failed", "unknown"]
QueueState = Literal["PENDING", "APPROVED", "REJECTED", "SENT", "FAILED"]
AgentStatus = Literal["ACTIVE", "KILLED"]

DISPOSITION_STATUSES: tuple[DispositionStatus, ...] = (
    "sent",
    "pending_approval",
    "blocked",
    "failed",
    "unknown",
)
DEFAULT_HOURLY = 20
DEFAULT_DAILY = 100
BODY_CAP = 50_000  # characters, text plus the serialized protocol body


@dataclass(frozen=True, slots=True)
class Disposition(Verdict):
    STATUSES: ClassVar[Collection[str]] = DISPOSITION_STATUSES
    WHAT: ClassVar[str] = "disposition"

    status: DispositionStatus
    reason: str = ""
    message_id: str | None = None
    approval_id: str | None = None
    id: str | None = None  # the send's id for status(); equals approval_id when queued
    state: str | None = None  # queue state on status(): pending|approved|rejected|sent|failed
    code: str | None = None  # a stable refusal code where one is defined (SPEC.md, enforcer)


@dataclass(frozen=True, slots=True)
class SendRequest:
    """A validated request. The agent supplies fields; the enforcer composes the MIME."""

    to: str
    sender: str
    text: str = ""
    subject: str | None = None
    msg_type: str | None = None  # protocol message type (lowercase), with `body`
    body: dict[str, Any] | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    reply_to: str | None = None
    # Optional caller-fixed Message-ID (an outbox row's), on the agent's own domain: a
    # resend with the same id is answered from the record instead of sending again.
    message_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"to": self.to, "from": self.sender, "text": self.text}
        if self.message_id is not None:
            out["message_id"] = self.message_id
        if self.subject is not None:
            out["subject"] = self.subject
        if self.msg_type is not None:
            out["type"] = self.msg_type
            out["body"] = self.body
        if self.in_reply_to is not None:
            out["in_reply_to"] = self.in_reply_to
        if self.references:
            out["references"] = list(self.references)
        if self.reply_to is not None:
            out["reply_to"] = self.reply_to
        return out


@dataclass(frozen=True, slots=True)
class Policy:
    hourly_cap: int = DEFAULT_HOURLY
    daily_cap: int = DEFAULT_DAILY
    allow: tuple[str, ...] = ()  # exact addresses ("a@b.c") and domains ("b.c" or "@b.c")

    def summary(self) -> str:
        return f"{self.hourly_cap}/hr · {self.daily_cap}/day · {len(self.allow)} allowlisted"


@dataclass(frozen=True, slots=True)
class Agent:
    id: str
    name: str
    address: str
    status: AgentStatus
    policy: Policy = field(default_factory=Policy)

    @property
    def killed(self) -> bool:
        return self.status != "ACTIVE"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "address": self.address,
            "status": self.status,
            "hourly_cap": self.policy.hourly_cap,
            "daily_cap": self.policy.daily_cap,
            "allow": list(self.policy.allow),
            "summary": self.policy.summary(),
        }


_QUEUE_STATUS: dict[str, DispositionStatus] = {
    "PENDING": "pending_approval",
    "APPROVED": "pending_approval",
    "REJECTED": "blocked",
    "SENT": "sent",
    "FAILED": "failed",
}


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One recorded send: a queued approval or a direct send (status SENT/FAILED)."""

    id: str
    agent_id: str
    state: QueueState
    reason: str
    request: SendRequest
    message_id: str | None
    created_at: float
    decided_at: float | None = None
    decided_by: str | None = None
    agent_name: str = ""

    def disposition(self) -> Disposition:
        """The answer this row gives an agent asking about its send."""
        approval = self.id if self.decided_at is not None or self.state == "PENDING" else None
        return Disposition(
            status=_QUEUE_STATUS[self.state], reason=self.reason,
            message_id=self.message_id if self.state == "SENT" else None, approval_id=approval,
            id=self.id, state=self.state.lower(),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "agent_id": self.agent_id,
            "agent": self.agent_name,
            "state": self.state,
            "reason": self.reason,
            "to": self.request.to,
            "subject": self.request.subject,
            "type": self.request.msg_type,
            "message_id": self.message_id,
            "created_at": self.created_at,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
        }


@dataclass(frozen=True, slots=True)
class Decision(Decided[Disposition]):
    """The answer to an operator decision on a held send."""


@dataclass(frozen=True, slots=True)
class RefusedRequest:
    """A request the enforcer refused outright, as the activity page lists it: which side
    (send, spend) and operation, the code, the reason, and a short summary of what was
    asked (recipient and subject, or amount and payee)."""

    id: str
    agent_id: str
    side: Literal["send", "spend"]
    operation: str
    code: str
    reason: str
    summary: str
    created_at: float
    agent_name: str = ""

