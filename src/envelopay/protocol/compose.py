"""Compose a protocol message into RFC 5322 bytes (CRLF line endings).

Layout: headers (From, To, Subject `TYPE | note`, Date, Message-ID, threading,
Auto-Submitted when automatic, X-Envelopay-Type), then multipart/mixed holding a
multipart/alternative (text/plain that is the JSON object alone, indented, `v`,
`type` and the note first; text/html with the human note and the JSON for people's
mail clients) and the same JSON, compact,
as a top-level application/json part (base64: 7-bit safe and stable under DKIM). The
text part has that shape for the simplest receiver, one that runs `json.loads` on the
whole text body (the spec's own AgentMail example sends the JSON as the whole text
body), and for a person in a terminal client, who reads one field a line; no line of
it is a JSON object on its own, so a receiver that tries the first line starting with
`{` first falls back to the whole text (SPEC.md "Composing"). Every header value is
checked for CR/LF before any byte is produced. Output is a pure function of the input
(the MIME boundary is derived from the content), so a resend of the same outbox row is
byte-identical.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import html
import json
import re
from collections.abc import Sequence
from datetime import datetime
from email.header import Header
from email.utils import format_datetime, make_msgid
from typing import Any

from envelopay.errors import UsageError
from envelopay.protocol.autosubmit import AUTO_GENERATED, AUTO_REPLIED
from envelopay.protocol.grammar import format_subject
from envelopay.protocol.messages import Message, MessageType
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parsed import Parsed

__all__ = [
    "BARE_ADDRESS",
    "HeaderValueError",
    "compose",
    "compose_message",
    "is_bare_address",
    "message_json",
    "new_message_id",
    "reply_headers",
]

# A bare address: no display name, no comments, no spaces (Outbound's contract). Public:
# whoever must know in advance whether compose will accept an address (engine/poison.py)
# asks this one pattern, not a copy of it.
BARE_ADDRESS = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]{1,64}@[A-Za-z0-9.-]{1,253}")
_MSGID = re.compile(r"<[\x21-\x3b\x3d\x3f-\x7e]{1,250}@[\x21-\x3b\x3d\x3f-\x7e]{1,250}>")
_DOMAIN = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?")
_SUBJECT_NOTE_MAX = 200  # a derived subject note is shortened; the JSON keeps the whole note
_MAX_REFERENCES = 20
_CRLF = "\r\n"
_BOUNDARY_PREFIX = "=_envelopay_"
_MAX_LINE = 998


class HeaderValueError(UsageError):
    """A header value would break the header block (CR, LF, NUL) or is malformed."""


def _check(name: str, value: str) -> str:
    if "\r" in value or "\n" in value or "\x00" in value:
        raise HeaderValueError(f"{name}: CR, LF or NUL is not allowed in a header value")
    return value


def is_bare_address(value: str) -> bool:
    """True when compose accepts `value` as a From or To address."""
    return BARE_ADDRESS.fullmatch(value) is not None


def _check_address(name: str, value: str) -> str:
    _check(name, value)
    if not is_bare_address(value):
        raise HeaderValueError(f"{name}: {value!r} is not a bare address like agent@example.com")
    return value


def _check_msgid(name: str, value: str) -> str:
    _check(name, value)
    if not _MSGID.fullmatch(value):
        raise HeaderValueError(f"{name}: {value!r} is not a Message-ID like <id@domain>")
    return value


def new_message_id(domain: str) -> str:
    """A fresh `<...@domain>` Message-ID. The domain is explicit: never getfqdn()."""
    _check("domain", domain)
    if not _DOMAIN.fullmatch(domain):
        raise HeaderValueError(f"domain: {domain!r} is not a domain name")
    return make_msgid(domain=domain)


def reply_headers(parsed: Parsed) -> tuple[str | None, tuple[str, ...]]:
    """(In-Reply-To, References) for a reply to `parsed` (RFC 5322 section 3.6.4).

    References is the parent's References (or its In-Reply-To when it has none) plus
    the parent's Message-ID; long chains keep the first id and the most recent ones."""
    parent = parsed.message_id
    if parent is None or not _MSGID.fullmatch(parent):
        return None, ()
    base = parsed.references or ((parsed.in_reply_to,) if parsed.in_reply_to else ())
    refs = (*(r for r in base if _MSGID.fullmatch(r)), parent)
    if len(refs) > _MAX_REFERENCES:
        refs = (refs[0], *refs[-(_MAX_REFERENCES - 1) :])
    return parent, refs


def _wire_dict(message: Message) -> dict[str, Any]:
    """The message's JSON object: `v` and `type` first, absent optional fields omitted."""
    dumped = message.model_dump(mode="json")
    out: dict[str, Any] = {"v": dumped.pop("v"), "type": dumped.pop("type")}
    fields = type(message).model_fields
    for key, value in dumped.items():
        info = fields.get(key)
        if value is None and info is not None and not info.is_required():
            continue
        out[key] = value
    return out


def message_json(message: Message, *, indent: int | None = None) -> str:
    """The JSON text of a message as composed (compact unless `indent`)."""
    wire = _wire_dict(message)
    return _compact_json(wire) if indent is None else _indented_json(wire, indent)


# One encoder, made once: json.dumps with arguments builds a new JSONEncoder per call,
# and a message's indented text encodes each scalar alone.
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_STRING = json.encoder.encode_basestring  # what that encoder does with a str (C version)


def _compact_json(value: Any) -> str:
    return _COMPACT.encode(value)


def _indented_json(value: Any, indent: int = 2) -> str:
    """json.dumps(value, ensure_ascii=False, indent=indent, separators=(",", ": ")), the
    same text (tested), built around the C encoder: json's indenting encoder is pure
    Python, and the indented copy was a quarter of composing a message."""
    try:
        return _indent(value, indent, 0)
    except _NotPlain:
        return json.dumps(value, ensure_ascii=False, indent=indent, separators=(",", ": "))


class _NotPlain(Exception):
    """A key json.dumps would convert (a number, None, a bool): the stdlib's way then."""


def _indent(value: Any, indent: int, level: int) -> str:
    if isinstance(value, dict) and value:
        inner, outer = "\n" + " " * (indent * (level + 1)), "\n" + " " * (indent * level)
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise _NotPlain
            items.append(f"{_STRING(k)}: {_indent(v, indent, level + 1)}")
        return "{" + inner + ("," + inner).join(items) + outer + "}"
    if isinstance(value, list | tuple) and value:
        inner, outer = "\n" + " " * (indent * (level + 1)), "\n" + " " * (indent * level)
        return "[" + inner + ("," + inner).join(_indent(v, indent, level + 1) for v in value) + outer + "]"
    return _STRING(value) if type(value) is str else _COMPACT.encode(value)


def _subject_note(out: Outbound) -> str | None:
    if out.note is not None:
        return _check("note", out.note)
    note = getattr(out.message, "note", None)
    if not isinstance(note, str):
        return None
    # Derived from the body: fold whitespace and control characters (a JSON note may
    # span lines) into single spaces, and shorten.
    note = " ".join("".join(ch if ch.isprintable() else " " for ch in note).split())
    if len(note) > _SUBJECT_NOTE_MAX:
        note = note[: _SUBJECT_NOTE_MAX - 1] + "…"
    return note


def _subject_header(subject: str) -> str:
    # Text that looks like an encoded-word is encoded too, so a receiver's single
    # RFC 2047 decoding gives back exactly this text (never a decoded CR/LF).
    if subject.isascii() and "=?" not in subject:
        if len(subject) > 900:
            raise HeaderValueError("subject: longer than 900 characters")
        return subject
    # RFC 2047 encoded-words, folded with CRLF.
    return Header(subject, "utf-8", header_name="Subject").encode(linesep=_CRLF)


def _fold_ids(ids: Sequence[str]) -> str:
    return (_CRLF + " ").join(ids)


def _reading_order(wire: dict[str, Any]) -> dict[str, Any]:
    """The object as a person reads it: `v`, `type`, then the human `note` (the sentence
    under the subject), then the rest. The same object; only the order of keys differs."""
    if "note" not in wire:
        return wire
    return {"v": wire["v"], "type": wire["type"], "note": wire["note"], **wire}


def _plain_part(wire: dict[str, Any], indented: str) -> tuple[str, str]:
    """(Content-Transfer-Encoding, encoded text) of the text/plain alternative: the JSON
    alone, indented two spaces (issue 30: one long line is unreadable in mutt), so the
    whole part is still one JSON document. RFC 5322 section 2.1.1: "Each line of
    characters MUST be no more than 998 characters"; a longer line (a long string) or
    non-ASCII text goes quoted-printable, whose soft breaks decode back to the same lines."""
    text = indented if "note" not in wire else _indented_json(_reading_order(wire))
    lines = text.split("\n")
    if text.isascii() and max(map(len, lines)) <= _MAX_LINE and _BOUNDARY_PREFIX not in text:
        return "7bit", _CRLF.join(lines)
    return "quoted-printable", _qp(text)


def _qp(text: str) -> str:
    data = binascii.b2a_qp(text.encode("utf-8"), istext=True, header=False)
    return data.decode("ascii").replace("\r\n", "\n").replace("\n", _CRLF)


def _html_part(message: Message, subject: str, indented: str) -> str:
    """The text/html alternative for people: the subject, a sentence, the note, and the
    JSON indented in <pre>. Always quoted-printable: `=` becomes `=3D`, so no boundary
    (which starts with `=_`) can occur in it."""
    kind = MessageType(message.type)
    note = getattr(message, "note", None)
    lines = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8"></head><body>',
        f"<p><b>{html.escape(subject, quote=False)}</b></p>",
        # Worded without the letters of that MIME subtype: a receiver may then skip this
        # container when looking for the data part (parse's fast path).
        f"<p>This is an Envelopay {kind.keyword} message. Its data is below, and attached for programs.</p>",
    ]
    if isinstance(note, str) and note.strip():
        lines.append(f"<p>{html.escape(note, quote=False)}</p>".replace("\n", "<br>"))
    # Element content needs only & < > escaped: quotes stay, so the JSON reads as written.
    lines += [f"<pre>{html.escape(indented, quote=False)}</pre>", "</body></html>"]
    return _qp("\n".join(lines).replace("\r", ""))


def compose(out: Outbound) -> bytes:
    """An `Outbound` as RFC 5322 bytes. Raises HeaderValueError before writing anything."""
    sender = _check_address("sender", out.sender)
    recipient = _check_address("recipient", out.recipient)
    message_id = _check_msgid("message_id", out.message_id)
    in_reply_to = _check_msgid("in_reply_to", out.in_reply_to) if out.in_reply_to is not None else None
    references = tuple(_check_msgid("references", r) for r in out.references)
    if out.date.tzinfo is None:
        raise HeaderValueError("date: must be timezone-aware")
    kind = MessageType(out.message.type)
    subject = format_subject(kind, _subject_note(out))
    subject_value = _subject_header(subject)

    wire = _wire_dict(out.message)
    json_text = _compact_json(wire)
    json_bytes = json_text.encode("utf-8")
    indented = _indented_json(wire)  # both alternatives show it (the plain one in reading order)
    cte, text = _plain_part(wire, indented)
    html_text = _html_part(out.message, subject, indented)
    b64 = base64.encodebytes(json_bytes).decode("ascii").replace("\n", _CRLF)
    digest = hashlib.sha256(message_id.encode() + json_bytes).hexdigest()[:32]
    # "=_" cannot occur in base64 or quoted-printable, nor in a 7bit part (checked).
    boundary = f"{_BOUNDARY_PREFIX}{digest}"
    alt_boundary = f"{_BOUNDARY_PREFIX}alt_{digest}"

    headers = [
        f"From: {sender}",
        f"To: {recipient}",
        f"Subject: {subject_value}",
        f"Date: {format_datetime(out.date)}",
        f"Message-ID: {message_id}",
    ]
    if in_reply_to is not None:
        headers.append(f"In-Reply-To: {in_reply_to}")
    if references:
        headers.append(f"References: {_fold_ids(references)}")
    if out.auto_submitted is not None:
        if out.auto_submitted not in (AUTO_REPLIED, AUTO_GENERATED):
            raise HeaderValueError(f"auto_submitted: {out.auto_submitted!r} is not an RFC 3834 keyword")
        # RFC 3834 §3.1.7: "The Auto-Submitted field, with a value of "auto-replied",
        # SHOULD be included in the message header of any automatic response."
        headers.append(f"Auto-Submitted: {out.auto_submitted}")
    headers += [
        "MIME-Version: 1.0",
        f"X-Envelopay-Type: {kind.keyword}",
        f'Content-Type: multipart/mixed; boundary="{boundary}"',
    ]
    body = [
        f"--{boundary}",
        f'Content-Type: multipart/alternative; boundary="{alt_boundary}"',
        "",
        f"--{alt_boundary}",
        'Content-Type: text/plain; charset="utf-8"',
        f"Content-Transfer-Encoding: {cte}",
        "",
        text,
        f"--{alt_boundary}",
        'Content-Type: text/html; charset="utf-8"',
        "Content-Transfer-Encoding: quoted-printable",
        "",
        html_text.rstrip(_CRLF),
        f"--{alt_boundary}--",
        f"--{boundary}",
        "Content-Type: application/json",
        'Content-Disposition: attachment; filename="envelopay.json"',
        "Content-Transfer-Encoding: base64",
        "",
        b64.rstrip(_CRLF),
        f"--{boundary}--",
        "",
    ]
    return (_CRLF.join(headers) + _CRLF + _CRLF + _CRLF.join(body)).encode("utf-8")


def compose_message(
    message: Message,
    *,
    sender: str,
    recipient: str,
    domain: str,
    now: datetime,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
    message_id: str | None = None,
    note: str | None = None,
) -> tuple[bytes, str]:
    """Compose a message; returns (raw bytes, Message-ID). The id is made from `domain`
    when not given."""
    mid = message_id if message_id is not None else new_message_id(domain)
    out = Outbound(
        sender=sender,
        recipient=recipient,
        message=message,
        message_id=mid,
        date=now,
        in_reply_to=in_reply_to,
        references=tuple(references),
        note=note,
    )
    return compose(out), mid
