"""The enforcer composes every message itself from the request's fields: the agent never
supplies MIME or headers, so header injection is not reachable from an agent token.

Plain mail is built directly as bytes (the fields were validated by policy.check_request:
no CR/LF or controls in any header value); email.message.EmailMessage costs over a
millisecond per message, most of the enforcer's budget. Protocol messages go through
protocol.compose.
"""

from __future__ import annotations

import binascii
import re
from datetime import UTC, datetime
from email.header import Header
from email.utils import format_datetime

from envelopay.enforcer.send.model import SendRequest
from envelopay.errors import UsageError
from envelopay.protocol.compose import compose
from envelopay.protocol.grammar import decode_subject
from envelopay.protocol.messages import MessageType, model_for
from envelopay.protocol.outbound import Outbound

__all__ = ["compose_request", "subject_problem"]

_CRLF = "\r\n"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_MAX_ENCODED = 4096  # the stdlib decoder is slow on thousands of encoded-words


def subject_problem(value: str) -> str:
    """"" when a plain-mail Subject may pass through; else why not. Shared by the policy
    check and compose (below), so what policy admits is what compose sends.

    An RFC 2047 encoded-word is decoded here the way a receiving MUA will decode it:
    text that decodes to CR, LF or another control character would read there as
    `hi\r\nBcc: victim@...`, so it is refused (FIELD-NOTES: encoded-words can decode
    to CR/LF), as is one that does not decode at all."""
    if _CONTROL.search(value):
        return "control characters (CR, LF, ...) in the subject"
    if "=?" in value:
        if len(value) > _MAX_ENCODED:
            return "a subject with encoded-words longer than 4096 characters"
        decoded, ok = decode_subject(value)
        if not ok:
            return "an RFC 2047 encoded-word in the subject does not decode"
        if _CONTROL.search(decoded):
            return "an RFC 2047 encoded-word in the subject decodes to CR, LF or a control character"
    return ""


def _subject(value: str) -> str:
    problem = subject_problem(value)
    if problem:
        raise UsageError(f"subject: {problem}")
    if value.isascii():
        return value  # encoded-words checked above pass through as the agent wrote them
    return Header(value, "utf-8", header_name="Subject").encode(linesep=_CRLF)


def _body(text: str) -> tuple[str, str]:
    """(Content-Transfer-Encoding, body) with CRLF line ends."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if text.isascii() and all(len(line) <= 998 for line in lines):
        return "7bit", _CRLF.join(lines)
    # Encode with bare LF line breaks (hard breaks in QP), then emit them as CRLF.
    qp = binascii.b2a_qp("\n".join(lines).encode("utf-8"), istext=True, header=False)
    return "quoted-printable", qp.decode("ascii").replace("\n", _CRLF)


def compose_request(req: SendRequest, *, message_id: str, date: datetime, agent_name: str) -> bytes:
    """RFC 5322 bytes for a validated request (see policy.check_request)."""
    if req.msg_type is not None and req.body is not None:
        return _protocol(req, message_id=message_id, date=date, agent_name=agent_name)
    cte, body = _body(req.text or "")
    headers = [
        f"From: {req.sender}",
        f"To: {req.to}",
        f"Subject: {_subject(req.subject or '')}",
        f"Date: {format_datetime(date.astimezone(UTC))}",
        f"Message-ID: {message_id}",
    ]
    if req.in_reply_to:
        headers.append(f"In-Reply-To: {req.in_reply_to}")
    if req.references:
        headers.append("References: " + (_CRLF + " ").join(req.references))
    if req.reply_to:
        headers.append(f"Reply-To: {req.reply_to}")
    headers += [
        # Attribution of every agent send, as the seed's EmailTags entry does.
        f"X-Envelopay-Agent: {agent_name}",
        "MIME-Version: 1.0",
        'Content-Type: text/plain; charset="utf-8"',
        f"Content-Transfer-Encoding: {cte}",
    ]
    return (_CRLF.join(headers) + _CRLF + _CRLF + body + _CRLF).encode("ascii")


def _protocol(req: SendRequest, *, message_id: str, date: datetime, agent_name: str) -> bytes:
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
