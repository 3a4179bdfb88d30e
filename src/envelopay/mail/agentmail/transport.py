"""An AgentMail inbox as a Transport (envelopay.mail.transport): our composed message out.

`AgentMailTransport.send(raw, sender, recipient)`. AgentMail
has no raw-MIME send: it composes the message itself from JSON fields and signs it with
its own DKIM key for the inbox's domain. So we hand it what the protocol needs and
nothing it would re-compose differently: our Subject exactly (`TYPE | note`, which
carries the type), text = the one-line JSON of the message (what a parser reading the
text part finds), the same JSON as an `application/json` attachment (what our parser
prefers), our `In-Reply-To`/`References` as custom headers, and our Message-ID as the
Idempotency-Key, so a resend of one outbox row within AgentMail's 24 h key lifetime is
answered with the original message instead of a second email. Our own DKIM signature
is not sent (AgentMail's signature over its own bytes is what the far end checks).
With `reply_via="endpoint"` a reply goes through `/messages/{id}/reply` instead (when
we know AgentMail's id for the message answered): AgentMail then sets In-Reply-To and
References itself and the subject becomes "Re: <original subject>", so the text starts
with the `TYPE | note` line, as the protocol author's agents write it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from email import message_from_bytes, policy
from email.header import decode_header, make_header
from typing import Any, Literal, Protocol

from envelopay.mail.agentmail.client import AgentMailClient, AgentMailError, Attachment

__all__ = ["AgentMailTransport", "EventLog", "Outgoing", "ledger_sources", "outgoing_fields"]


class EventLog(Protocol):
    """The part of the ledger (envelopay.ledger.Store) the inbox and its transport need."""

    def event_done(
        self, source: str, event_id: str, now: datetime, data: Mapping[str, Any] | None = None
    ) -> bool: ...

    def event_seen(self, source: str, event_id: str) -> bool: ...

    def event_data(self, source: str, event_id: str) -> Mapping[str, Any] | None: ...


def ledger_sources(inbox: str) -> tuple[str, str, str]:
    """(webhook events, messages handled, RFC Message-ID → AgentMail ids) for one inbox."""
    return f"agentmail-event:{inbox}", f"agentmail-message:{inbox}", f"agentmail-id:{inbox}"


@dataclass(frozen=True, slots=True)
class Outgoing:
    subject: str
    message_id: str | None
    in_reply_to: str | None
    references: str | None
    payload: bytes | None  # the application/json part, decoded
    auto_submitted: str | None = None  # RFC 3834: our automatic answers say so


def outgoing_fields(raw: bytes) -> Outgoing:
    """What AgentMail needs, read back from the exact bytes we composed (and signed)."""
    msg = message_from_bytes(raw, policy=policy.compat32)
    subject = str(make_header(decode_header(msg.get("Subject", ""))))
    payload = None
    for part in msg.walk() if msg.is_multipart() else [msg]:
        if part.get_content_type() == "application/json":
            data = part.get_payload(decode=True)
            payload = data if isinstance(data, bytes) else None
            break
    return Outgoing(subject, msg.get("Message-ID"), msg.get("In-Reply-To"), msg.get("References"), payload,
                    msg.get("Auto-Submitted"))


@dataclass
class AgentMailTransport:
    client: AgentMailClient
    log: EventLog
    clock: Callable[[], datetime]
    reply_via: Literal["send", "endpoint"] = "send"

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        if sender.lower() != self.client.inbox.lower():
            raise AgentMailError(f"{sender} is not this AgentMail inbox ({self.client.inbox})", status=400)
        out = outgoing_fields(raw)
        if out.payload is None or out.message_id is None:
            raise AgentMailError("an outgoing message needs a Message-ID and an application/json part",
                                 status=400)
        line = json.dumps(json.loads(out.payload), ensure_ascii=False, separators=(",", ":"))
        attachment = Attachment("envelopay.json", "application/json", out.payload)
        fields = (("In-Reply-To", out.in_reply_to), ("References", out.references),
                  ("Auto-Submitted", out.auto_submitted))
        headers = {k: v for k, v in fields if v}
        _, _, ids = ledger_sources(self.client.inbox)
        answered = self.log.event_data(ids, out.in_reply_to) if out.in_reply_to else None
        if self.reply_via == "endpoint" and answered and isinstance(answered.get("message_id"), str):
            sent = await self.client.reply(
                answered["message_id"], text=f"{out.subject}\n\n{line}\n", to=[recipient],
                attachments=[attachment], idempotency_key=out.message_id,
                headers={"Auto-Submitted": out.auto_submitted} if out.auto_submitted else None,
            )
        else:
            sent = await self.client.send(
                to=[recipient], subject=out.subject, text=f"{line}\n", attachments=[attachment],
                headers=headers, idempotency_key=out.message_id,
            )
        self.log.event_done(ids, out.message_id, self.clock(),
                            {"message_id": sent.message_id, "thread_id": sent.thread_id, "sent": True})

    async def close(self) -> None:
        await self.client.aclose()
