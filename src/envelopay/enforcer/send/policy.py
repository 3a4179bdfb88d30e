"""The pure half of the send policy: request shape, header fields, content, sender pin,
allowlist. No I/O here; `send.enforcer.Enforcer` runs these in order around its store reads.

Order (issue 7, cheapest and most terminal first): recipient shape, header fields (and
content: body cap, simple content only, a valid protocol message) before any I/O; then
agent/kill, sender pin, duplicate guard, allowlist, caps in the enforcer.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from envelopay.enforcer.send.mime import subject_problem
from envelopay.enforcer.send.model import BODY_CAP, Agent, Disposition, SendRequest
from envelopay.mail.addresses import AddressProblem, parse_address
from envelopay.protocol.messages import MessageType, model_for

__all__ = [
    "RAW_MIME_KEYS",
    "address_problem",
    "allowlisted",
    "check_request",
    "check_sender",
    "fingerprint",
    "valid_address",
]

_MSGID = re.compile(r"<[\x21-\x3b\x3d\x3f-\x7e]{1,500}>")  # printable, no '<' '>' inside
_PRINTABLE_LINE = re.compile(r"[^\x00-\x1f\x7f]*")  # no CR, LF or other controls

# Fields that would let an agent hand over MIME or headers: refused outright.
RAW_MIME_KEYS = frozenset({"raw", "mime", "headers", "html", "attachments", "cc", "bcc"})


def address_problem(value: object) -> str:
    """"" for exactly one bare address; otherwise the mail layer's stable reason code.
    Whitespace, commas, CR/LF and a display name are all refused, so a second recipient
    cannot be smuggled past a check written for one."""
    if not isinstance(value, str):
        return "empty" if value is None else "syntax"
    parsed = parse_address(value)
    return parsed.reason if isinstance(parsed, AddressProblem) else ""


def valid_address(value: object) -> bool:
    return address_problem(value) == ""


def _blocked(reason: str) -> Disposition:
    return Disposition(status="blocked", reason=reason)


def _references(value: object) -> tuple[str, ...] | None:
    if value is None:
        return ()
    items: list[object]
    if isinstance(value, str):
        if not _PRINTABLE_LINE.fullmatch(value):
            return None
        items = list(value.split())
    elif isinstance(value, list):
        items = list(value)
    else:
        return None
    if len(items) > 20 or not all(isinstance(i, str) and _MSGID.fullmatch(i) for i in items):
        return None
    return tuple(str(i) for i in items)


def check_request(raw: Mapping[str, Any]) -> SendRequest | Disposition:
    """Validate a request's shape before any I/O. Unknown keys (e.g. a forged agent id)
    are ignored: identity comes from the token, never from here."""
    # 1. recipient shape: exactly one address.
    to = raw.get("to")
    if isinstance(to, list) and len(to) == 1:
        to = to[0]
    problem = address_problem(to)
    if problem:
        return _blocked(f"invalid recipient: {problem}")
    assert isinstance(to, str)
    # 2. header fields.
    reply_to = raw.get("reply_to")
    if reply_to is not None and not valid_address(reply_to):
        return _blocked("invalid header: reply_to must be a single address")
    in_reply_to = raw.get("in_reply_to")
    if in_reply_to is not None and not (isinstance(in_reply_to, str) and _MSGID.fullmatch(in_reply_to)):
        return _blocked("invalid header: in_reply_to")
    message_id = raw.get("message_id")
    if message_id is not None and not (
        isinstance(message_id, str) and _MSGID.fullmatch(message_id) and "@" in message_id
    ):
        return _blocked("invalid header: message_id")
    refs = _references(raw.get("references"))
    if refs is None:
        return _blocked("invalid header: references")
    subject = raw.get("subject")
    if subject is not None and not (
        isinstance(subject, str) and len(subject) <= 900 and _PRINTABLE_LINE.fullmatch(subject)
    ):
        return _blocked("invalid header: subject")
    if isinstance(subject, str) and subject_problem(subject):
        return _blocked(f"invalid header: subject: {subject_problem(subject)}")
    sender = raw.get("from")
    if not valid_address(sender):
        return _blocked("invalid header: from")
    assert isinstance(sender, str)
    # Content: simple content only, then the body cap, then the protocol message.
    if any(k in raw for k in RAW_MIME_KEYS):
        return _blocked("simple content only: raw MIME, headers and attachments are not accepted")
    text = raw.get("text", "")
    if not isinstance(text, str):
        return _blocked("invalid text")
    msg_type = raw.get("type")
    body = raw.get("body")
    size = len(text)
    if msg_type is not None or body is not None:
        if not isinstance(body, dict):
            return _blocked("invalid message: body must be a JSON object")
        size += len(json.dumps(body, separators=(",", ":")))
    if size > BODY_CAP:
        return _blocked(f"body too large: {size} > {BODY_CAP} characters")
    if msg_type is not None or body is not None:
        assert isinstance(body, dict)
        problem = _protocol_problem(msg_type, body)
        if problem:
            return _blocked(f"invalid message: {problem}")
        assert isinstance(msg_type, str) and isinstance(body, dict)
        msg_type = msg_type.lower()
    elif subject is None:
        return _blocked("invalid message: a subject or a protocol message is required")
    return SendRequest(
        to=to,
        sender=sender,
        text=text,
        subject=subject,
        msg_type=msg_type,
        body=body,
        in_reply_to=in_reply_to,
        references=refs,
        reply_to=reply_to,
        message_id=message_id,
    )


def _protocol_problem(msg_type: object, body: dict[str, Any]) -> str:
    if not isinstance(msg_type, str):
        return "type is required with a body"
    try:
        kind = MessageType(msg_type.lower())
    except ValueError:
        return f"unknown type {msg_type!r}"
    if body.get("type", kind.value) != kind.value:
        return "body type does not match type"
    try:
        model_for(kind).model_validate({**body, "type": kind.value})
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return ""


def check_sender(req: SendRequest, agent: Agent) -> Disposition | None:
    """Sender pin: From equals the agent's own address, case-insensitively; fails closed."""
    own = agent.address.strip()
    if not own or req.sender.lower() != own.lower():
        return _blocked("from must be the agent's own address")
    if req.message_id is not None and (
        req.message_id[1:-1].rsplit("@", 1)[1].lower() != own.rsplit("@", 1)[1].lower()
    ):
        return _blocked("message_id must be on the agent's own domain")
    return None


def allowlisted(recipient: str, allow: tuple[str, ...]) -> bool:
    """Exact addresses and whole domains ("example.com" or "@example.com"); case-insensitive.
    A domain entry matches that domain only, not its subdomains."""
    rcpt = recipient.lower()
    domain = rcpt.rsplit("@", 1)[1]
    for entry in allow:
        e = entry.strip().lower()
        if "@" in e and not e.startswith("@"):
            if e == rcpt:
                return True
        elif e.lstrip("@") == domain:
            return True
    return False


def fingerprint(req: SendRequest) -> str:
    """What makes two sends duplicates: recipient, subject and content."""
    doc = json.dumps(
        [req.to.lower(), req.subject, req.msg_type, req.body, req.text], sort_keys=True, default=str
    )
    return hashlib.sha256(doc.encode()).hexdigest()
