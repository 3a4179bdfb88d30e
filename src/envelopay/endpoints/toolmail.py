"""Email-as-tool message format (seeds/email-as-tool-endpoints.txt, "Message format").

A request is an email whose payload is ONE top-level ``application/json`` MIME part
(each part a self-contained object: no delimiter to escape) plus a human-readable
text part for the audit trail. The call id travels in the structured header
``X-Envelopay-Call`` (metadata only). The reply mirrors the request: the same
payload format with an explicit ``status``, threaded by In-Reply-To.

This module is pure: bytes and values in, bytes and values out; `now` is supplied.
"""

from __future__ import annotations

import email
import email.parser
import hashlib
import json
import re
from dataclasses import dataclass, replace
from datetime import datetime
from email import policy as email_policy
from email.message import EmailMessage, Message
from email.utils import format_datetime
from typing import Any, Literal

from envelopay.mail.addresses import Address, parse_address
from envelopay.protocol.autosubmit import AutoSubmitted, no_answer_reason
from envelopay.protocol.headers import HeaderBlock, read_headers
from envelopay.protocol.outside_json import too_deep
from envelopay.protocol.payload import MAX_NESTING

__all__ = [
    "CALL_HEADER",
    "ToolMail",
    "build_tool_mail",
    "read_in_reply_to",
    "read_tool_mail",
]

CALL_HEADER = "X-Envelopay-Call"
MAX_PAYLOAD = 256 * 1024
_HEADER_SAFE = re.compile(r"^[^\r\n]*$")
_CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")

PayloadProblem = Literal["missing_payload", "invalid_json", "payload_too_large", "not_an_object"]


@dataclass(frozen=True, slots=True)
class ToolMail:
    """What a tool endpoint (or a client reading a reply) needs from one mail."""

    message_id: str | None
    in_reply_to: str | None
    sender: str | None
    recipient: str | None
    subject: str
    call_id: str | None
    payload: dict[str, Any] | None
    problem: PayloadProblem | None
    no_answer: str | None = None  # an RFC 3834 signal: no automatic answer (protocol.autosubmit)


def _one(msg: Message, name: str) -> str | None:
    values = msg.get_all(name) or []
    if len(values) != 1:
        return None  # absent, or a duplicated singleton we refuse to pick from
    value = str(values[0]).strip()
    return value if _HEADER_SAFE.match(value) else None


def _addr(value: str | None) -> str | None:
    # Replies are matched to calls by sender: only an unambiguous single mailbox counts
    # (the stdlib's parseaddr on this Python accepts lists and odd forms).
    if value is None:
        return None
    parsed = parse_address(value, allow_display_name=True)
    return parsed.addr.lower() if isinstance(parsed, Address) else None


def read_in_reply_to(raw: bytes) -> str | None:
    """The In-Reply-To that read_tool_mail would find, from the header block alone.

    A block the house reader accepts (protocol/headers.py: no bare CR, NUL, mbox line,
    stray or blank continuation, duplicate In-Reply-To) has the fields the stdlib reads
    in it, so for an ASCII value the stdlib's answer is worked out here from the same
    bytes (its compat32 value is the lines after the colon, stripped; a line break left
    inside is refused by `_HEADER_SAFE`). Any other block goes to the stdlib itself,
    stopped before the body (it compiles a regular expression per MIME boundary)."""
    block = read_headers(raw)
    if isinstance(block, HeaderBlock):
        found = block.get_all("in-reply-to")
        if not found:
            return None
        if len(found) == 1 and found[0].raw_value.isascii():
            value = found[0].raw_value.decode("ascii").strip()
            return value if _HEADER_SAFE.match(value) else None
    head = email.parser.BytesParser(policy=email_policy.compat32).parsebytes(raw, headersonly=True)
    return _one(head, "In-Reply-To")


def read_tool_mail(raw: bytes) -> ToolMail:
    """Extract the typed payload from the TOP-LEVEL parts only (never from an attached
    message/rfc822: a forwarded message is not a request). Never raises."""
    msg = email.message_from_bytes(raw, policy=email_policy.compat32)
    call = _one(msg, CALL_HEADER)
    sender = _addr(_one(msg, "From"))
    fields: dict[str, list[str]] = {}
    for name, value in msg.items():
        fields.setdefault(name.lower(), []).append(str(value))
    base = ToolMail(
        message_id=_one(msg, "Message-ID"),
        in_reply_to=_one(msg, "In-Reply-To"),
        sender=sender,
        recipient=_addr(_one(msg, "To")),
        subject=_one(msg, "Subject") or "",
        call_id=call if call is not None and _CALL_ID.match(call) else None,
        payload=None,
        problem="missing_payload",
        no_answer=no_answer_reason(fields, sender),
    )
    parts: list[Message] = [msg]
    if msg.is_multipart():
        top = msg.get_payload()
        parts = [p for p in top if isinstance(p, Message)] if isinstance(top, list) else []
    for part in parts:
        if part.get_content_type() != "application/json":
            continue
        data = part.get_payload(decode=True)
        if not isinstance(data, bytes):
            return replace(base, problem="invalid_json")
        if len(data) > MAX_PAYLOAD:
            return replace(base, problem="payload_too_large")
        # Depth first: py-evm raises the recursion limit, and the decoder then overflows
        # the C stack instead of raising RecursionError (protocol.outside_json).
        if too_deep(data.decode("utf-8", "replace"), MAX_NESTING):
            return replace(base, problem="invalid_json")
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return replace(base, problem="invalid_json")
        if not isinstance(obj, dict):
            return replace(base, problem="not_an_object")
        return replace(base, payload=obj, problem=None)
    return replace(base, problem="missing_payload")


def build_tool_mail(
    *,
    sender: str,
    recipient: str,
    subject: str,
    payload: dict[str, Any],
    human: str,
    message_id: str,
    now: datetime,
    call_id: str | None = None,
    in_reply_to: str | None = None,
    auto_submitted: AutoSubmitted | None = None,
) -> bytes:
    """Compose a request or reply: text/plain for people, application/json for programs."""
    for name, value in (("sender", sender), ("recipient", recipient), ("subject", subject),
                        ("message_id", message_id), ("call_id", call_id or ""),
                        ("in_reply_to", in_reply_to or "")):
        if not _HEADER_SAFE.match(value):
            raise ValueError(f"{name} contains a line break")
    msg = EmailMessage(policy=email_policy.SMTP)
    msg["From"] = sender
    msg["To"] = recipient
    msg["Subject"] = subject
    msg["Date"] = format_datetime(now)
    msg["Message-ID"] = message_id
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
        msg["References"] = in_reply_to
    if call_id:
        msg[CALL_HEADER] = call_id
    if auto_submitted is not None:
        msg["Auto-Submitted"] = auto_submitted  # RFC 3834 §5
    msg.set_content(human)
    # base64 part: 7-bit safe and stable under DKIM (FIELD-NOTES "Email").
    msg.add_attachment(
        json.dumps(payload, sort_keys=True, separators=(",", ":")).encode(),
        maintype="application",
        subtype="json",
        filename="payload.json",
    )
    # A boundary derived from the Message-ID: the same mail composes to the same bytes.
    msg.set_boundary("=_ep_" + hashlib.sha256(message_id.encode()).hexdigest()[:24])
    return msg.as_bytes()
