"""What handling one inbound message did (`Outcome`) and what a send recorded (`Sent`).

An Outcome is written beside the step in the ledger, so a redelivered message gets
the recorded one back (`repeat` says why). What only this handling measured (its rail
verifications' timings, the waiting message's next look) is not recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.outbound import Outbound

__all__ = ["Outcome", "OutcomeStatus", "Repeat", "Sent"]

OutcomeStatus = Literal[
    "processed",  # a transition happened (perhaps with a reply)
    "refused",  # answered with an OOPS (or silently, for an OOPS), nothing changed
    "ignored",  # not protocol mail, or nothing to answer
    "busy",  # another worker holds this message's claim; leave it for later
    "deferred",  # DKIM key lookup failed temporarily; leave it for later
    "waiting",  # the proof is not final yet: parked in the ledger, looked at again (engine/waiting.py)
    "quarantined",  # handling it raised (a bug, or poison we did not foresee): recorded, never retried
]
Repeat = Literal["message_id", "retransmission"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What handling one inbound message did."""

    status: OutcomeStatus
    message_id: str | None = None
    flow_id: str | None = None
    state: str | None = None
    oops: OopsCode | None = None
    detail: str = ""
    outbox: tuple[str, ...] = ()  # Message-IDs of the replies written to the outbox
    verdict: Mapping[str, Any] | None = None
    repeat: Repeat | None = None  # set when this is a recorded outcome handed back again
    # The `lenient` interop profile's readings applied to this message (its `lenient:`
    # warnings, SPEC.md "Interop profile `lenient`"); empty under strict.
    lenient: tuple[str, ...] = ()
    retry_at: datetime | None = None  # waiting: when the message is looked at again (not recorded)
    dkim: str | None = None  # the DKIM verdict against the From acted on (engine.alignment)
    # Why the answer was not sent (held in the outbox): an RFC 3834 signal of the message
    # (auto_submitted, precedence_list|bulk|junk, list_mail, null_return_path,
    # robot_sender) or a limit (rate_limited, loop_detected). SPEC.md "Automatic answers".
    unanswered: str | None = None
    # (chain, seconds) of each rail verification this handling made (engine/verify.py
    # timed_verify), for worker serve's metrics; not recorded, and no part of the outcome's
    # identity (a redelivery handed the recorded outcome back made none).
    verify_seconds: tuple[tuple[str, float], ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message_id": self.message_id,
            "flow_id": self.flow_id,
            "state": self.state,
            "oops": self.oops.value if self.oops else None,
            "detail": self.detail,
            "outbox": list(self.outbox),
            "verdict": dict(self.verdict) if self.verdict is not None else None,
            "lenient": list(self.lenient),
            **({"dkim": self.dkim} if self.dkim is not None else {}),
            **({"unanswered": self.unanswered} if self.unanswered is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], repeat: Repeat | None = None) -> Outcome:
        return cls(
            status=data["status"],
            message_id=data.get("message_id"),
            flow_id=data.get("flow_id"),
            state=data.get("state"),
            oops=OopsCode(data["oops"]) if data.get("oops") else None,
            detail=data.get("detail", ""),
            outbox=tuple(data.get("outbox", ())),
            verdict=data.get("verdict"),
            repeat=repeat,
            lenient=tuple(data.get("lenient", ())),
            dkim=data.get("dkim"),
            unanswered=data.get("unanswered"),
        )


@dataclass(frozen=True, slots=True)
class Sent:
    """What `Engine.send` recorded: the flow and the outbox row's Message-ID."""

    flow_id: str
    state: str
    message_id: str
    outbound: Outbound
