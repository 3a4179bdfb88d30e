"""The enforcer composes every message itself from the request's fields: the agent never
supplies MIME or headers, so header injection is not reachable from an agent token."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime

from envelopay.enforcer.model import SendRequest

__all__ = ["compose_request"]


def compose_request(req: SendRequest, *, message_id: str, date: datetime, agent_name: str) -> bytes:
    """RFC 5322 bytes for a validated request (see policy.check_request)."""
    if req.msg_type is not None and req.body is not None:
        return _protocol(req, message_id=message_id, date=date, agent_name=agent_name)
    msg = EmailMessage(policy=SMTP)
    msg["From"] = req.sender
    msg["To"] = req.to
    msg["Subject"] = req.subject or ""
    msg["Date"] = format_datetime(date.astimezone(UTC))
    msg["Message-ID"] = message_id
    if req.in_reply_to:
        msg["In-Reply-To"] = req.in_reply_to
    if req.references:
        msg["References"] = " ".join(req.references)
    if req.reply_to:
        msg["Reply-To"] = req.reply_to
    # Attribution of every agent send, as the seed's EmailTags entry does.
    msg["X-Envelopay-Agent"] = agent_name
    msg.set_content(req.text or "")
    return msg.as_bytes()


def _protocol(req: SendRequest, *, message_id: str, date: datetime, agent_name: str) -> bytes:
    from envelopay.protocol.compose import compose
    from envelopay.protocol.messages import MessageType, model_for
    from envelopay.protocol.outbound import Outbound

    assert req.msg_type is not None and req.body is not None
    kind = MessageType(req.msg_type)
    message = model_for(kind).model_validate({**req.body, "type": kind.value})
    out = Outbound(
        sender=req.sender,
        recipient=req.to,
        message=message,  # type: ignore[arg-type]  # model_for returns the base; it is a Message
        message_id=message_id,
        date=date,
        in_reply_to=req.in_reply_to,
        references=req.references,
        note=req.subject,
    )
    raw = compose(out)
    extra = f"X-Envelopay-Agent: {agent_name}\r\n"
    if req.reply_to:
        extra = f"Reply-To: {req.reply_to}\r\n" + extra
    # Validated single-line values prepended as header fields: still one header block.
    return extra.encode("ascii") + raw
