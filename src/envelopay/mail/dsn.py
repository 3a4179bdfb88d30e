"""Recognise a delivery status notification (a bounce) and read what it reports.

A DSN (RFC 3464, carried as RFC 6522 `multipart/report; report-type=delivery-status`)
is never protocol mail: it is the mail system talking, not a peer. `parse_dsn(raw)`
returns None for anything that is not one, else a `Dsn` with the reporting MTA, the
envelope id, each recipient's Action/Status/Diagnostic-Code and the Message-ID of the
returned message (from its `message/rfc822` or `text/rfc822-headers` part), which is
how a bounce finds its outbox row. Pure: bytes in, a value out; never raises on input.

Anyone can send something shaped like a DSN, so a caller only trusts what it can
check: the returned Message-ID must be one of its own outbox rows, and the failed
recipient must be that row's recipient (see SPEC.md, "Bounces").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email import message_from_bytes, policy
from email.message import Message

__all__ = ["Dsn", "DsnRecipient", "parse_dsn"]

# RFC 3464 §2.3.4: status-code = class "." subject "." detail; class is 2, 4 or 5.
_STATUS = re.compile(r"^[245]\.\d{1,3}\.\d{1,3}$")
_MSGID = re.compile(r"<[^<>\s]{1,500}>")


@dataclass(frozen=True, slots=True)
class DsnRecipient:
    final_recipient: str  # the address part of Final-Recipient (rfc822; addr)
    action: str  # failed | delayed | delivered | relayed | expanded (RFC 3464 §2.3.3)
    status: str  # e.g. "5.1.1"
    diagnostic: str | None = None  # Diagnostic-Code, unfolded
    original_recipient: str | None = None


@dataclass(frozen=True, slots=True)
class Dsn:
    reporting_mta: str | None
    envelope_id: str | None  # Original-Envelope-Id (RFC 3461 ENVID), when the sender set one
    original_message_id: str | None  # Message-ID of the returned message
    recipients: tuple[DsnRecipient, ...]
    message_id: str | None = None  # the report's own Message-ID

    @property
    def failed(self) -> tuple[DsnRecipient, ...]:
        """Recipients the mail system gave up on (a permanent failure)."""
        return tuple(r for r in self.recipients if r.action == "failed")


def parse_dsn(raw: bytes) -> Dsn | None:
    """The DSN in `raw`, or None when `raw` is not a delivery-status report."""
    # Cheap refusal first: the inbound path asks this of every message.
    head = raw.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    if b"multipart/report" not in head.lower():
        return None
    try:
        msg = message_from_bytes(raw, policy=policy.compat32)
    except Exception:  # the stdlib parser is lax; anything it cannot take is not a DSN
        return None
    if msg.get_content_type() != "multipart/report":
        return None
    if str(msg.get_param("report-type") or "").lower() != "delivery-status":
        return None
    payload = msg.get_payload()
    if not isinstance(payload, list):
        return None
    parts = [p for p in payload if isinstance(p, Message)]
    status_part = next((p for p in parts if p.get_content_type() == "message/delivery-status"), None)
    if status_part is None:
        return None
    groups = _field_groups(_part_text(status_part))
    if not groups:
        return None
    per_message, per_recipient = groups[0], groups[1:]
    recipients = tuple(r for r in (_recipient(g) for g in per_recipient) if r is not None)
    if not recipients:
        return None
    return Dsn(
        reporting_mta=_typed_value(per_message.get("reporting-mta")),
        envelope_id=per_message.get("original-envelope-id"),
        original_message_id=_returned_message_id(parts),
        recipients=recipients,
        message_id=_msgid(msg.get("Message-ID")),
    )


def _part_text(part: Message) -> str:
    """The body of a message/delivery-status part as text. The stdlib parses that type
    into a list of header blocks; flatten them back into RFC 822-style field groups."""
    payload = part.get_payload()
    if isinstance(payload, list):
        blocks = []
        for block in payload:
            if isinstance(block, Message):
                blocks.append("".join(f"{k}: {v}\n" for k, v in block.items()))
        return "\n".join(blocks)
    if isinstance(payload, str):
        return payload
    return ""


def _field_groups(text: str) -> list[dict[str, str]]:
    """Blank-line separated groups of `Name: value` fields (folded lines unfolded),
    names lower-cased; the first occurrence of a name in a group wins."""
    groups: list[dict[str, str]] = []
    current: dict[str, str] = {}
    last: str | None = None
    for line in text.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            if current:
                groups.append(current)
            current, last = {}, None
        elif line[0] in " \t" and last is not None:
            current[last] = f"{current[last]} {line.strip()}"
        elif ":" in line:
            name, _, value = line.partition(":")
            last = name.strip().lower()
            current.setdefault(last, value.strip())
            if current[last] != value.strip():
                last = None  # a repeated field: ignore its continuation lines too
    if current:
        groups.append(current)
    return groups


def _typed_value(value: str | None) -> str | None:
    """`rfc822; addr` → `addr` (RFC 3464 address-type / mta-name-type prefixes)."""
    if value is None:
        return None
    _, sep, rest = value.partition(";")
    return (rest if sep else value).strip() or None


def _recipient(fields: dict[str, str]) -> DsnRecipient | None:
    final = _typed_value(fields.get("final-recipient"))
    action = (fields.get("action") or "").strip().lower()
    status = (fields.get("status") or "").split(" ", 1)[0].strip()
    if not final or not action or not _STATUS.match(status):
        return None
    return DsnRecipient(
        final_recipient=final.strip("<>").lower(),
        action=action,
        status=status,
        diagnostic=fields.get("diagnostic-code"),
        original_recipient=(_typed_value(fields.get("original-recipient")) or "").strip("<>").lower() or None,
    )


def _returned_message_id(parts: list[Message]) -> str | None:
    for part in parts[1:]:
        ctype = part.get_content_type()
        if ctype == "message/rfc822":
            inner = part.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], Message):
                return _msgid(inner[0].get("Message-ID"))
        elif ctype == "text/rfc822-headers":
            body = part.get_payload(decode=True)
            if isinstance(body, bytes):
                headers = message_from_bytes(body, policy=policy.compat32)
                return _msgid(headers.get("Message-ID"))
    return None


def _msgid(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    m = _MSGID.search(value)
    return m.group(0) if m else None
