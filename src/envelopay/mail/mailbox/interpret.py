"""What a stored message says: headers, text body, attachments and status (pure, never raising).

Every raw message is stored before it is interpreted. A message whose MIME or headers
cannot be understood is still indexed, with `status = "malformed"` and the parser's
problems recorded; nothing received is dropped.
"""

from __future__ import annotations

import email
import re
from dataclasses import dataclass, field
from email import policy
from email.message import Message
from email.utils import getaddresses, parsedate_to_datetime

from envelopay.mail.mailbox.inputs import MSGID_RE
from envelopay.mail.mailbox.records import Attachment
from envelopay.protocol.grammar import decode_subject
from envelopay.protocol.parse import parse

__all__ = ["Interpretation", "body_text", "interpret"]

# Problems that make a message `malformed` besides parser defects and a failed parse.
_STRUCTURAL = {"from_not_single", "multipart_without_parts", "undecodable_subject"}


@dataclass(slots=True)
class Interpretation:
    """The index's view of one message. `attachment_parts` carries the decoded bytes
    (for extraction); `attachment_meta` only names and sizes (for our own copies)."""

    message_id: str | None = None
    from_addr: str = ""
    to_addrs: list[str] = field(default_factory=list)
    cc_addrs: list[str] = field(default_factory=list)
    subject: str = ""
    header_date: str | None = None
    in_reply_to: str | None = None
    references: list[str] = field(default_factory=list)
    reply_to: str | None = None
    body: str = ""
    attachment_parts: list[tuple[str, str, bytes]] = field(default_factory=list)
    attachment_meta: list[Attachment] = field(default_factory=list)
    protocol_type: str | None = None
    status: str = "ok"  # "ok" | "malformed"
    problems: list[str] = field(default_factory=list)


def _addr_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for _name, addr in getaddresses(values):
        if addr and "@" in addr:
            out.append(addr.lower())
    return out


def _msgids(value: str | None) -> list[str]:
    return MSGID_RE.findall(value or "")


def _text_of(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:
        return payload.decode("utf-8", errors="replace")


def _strip_html(text: str) -> str:
    text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
    text = re.sub(r"(?s)<[^>]+>", " ", text)
    return re.sub(r"[ \t]+", " ", text).strip()


def interpret(raw: bytes) -> Interpretation:
    """Headers, text body and attachments of a stored message, never raising.

    Uses the stdlib's compat32 parser (fast and lax) and records its defects; the
    protocol view comes from envelopay.protocol.parse. A failure anywhere marks the
    message `malformed` but keeps what could be read."""
    problems: list[str] = []
    info = Interpretation(problems=problems)
    try:
        _read_headers_and_body(raw, info)
    except Exception as exc:  # the stored bytes are the record; interpretation is best effort
        problems.append(f"unparseable: {type(exc).__name__}")
        info.body = raw.decode("utf-8", errors="replace")

    parsed = parse(raw)
    if parsed.protocol:
        info.protocol_type = parsed.type.value if parsed.type is not None else "unknown"
        problems.extend(f"protocol:{p.code.value}:{p.field or ''}" for p in parsed.problems)
    bad = any(p.startswith("unparseable") or p in _STRUCTURAL or p.endswith("Defect") for p in problems) or (
        "parser_error" in parsed.warnings
    )
    info.status = "malformed" if bad else "ok"
    return info


def body_text(raw: bytes) -> str:
    """The text body alone, exactly as `interpret` finds it (no protocol view): what the
    mailbox reads from a file when the index holds only the body's first characters."""
    info = Interpretation(problems=[])
    try:
        _read_headers_and_body(raw, info)
    except Exception:  # as interpret: the raw text stands in
        info.body = raw.decode("utf-8", errors="replace")
    return info.body


def _read_headers_and_body(raw: bytes, info: Interpretation) -> None:
    """Fill `info` from the MIME structure; may raise part-way (what was read stays)."""
    problems = info.problems
    msg = email.message_from_bytes(raw, policy=policy.compat32)
    problems.extend(type(d).__name__ for d in msg.defects)

    def header(name: str) -> str | None:
        values = msg.get_all(name) or []
        if len(values) > 1:
            problems.append(f"duplicate_{name.lower()}")
        return str(values[0]) if values else None

    subject, ok = decode_subject(" ".join((header("Subject") or "").split()))
    if not ok:
        problems.append("undecodable_subject")
    info.subject = subject.replace("\r", " ").replace("\n", " ")
    mids = _msgids(header("Message-ID"))
    info.message_id = mids[0] if mids else None
    irt = _msgids(header("In-Reply-To"))
    info.in_reply_to = irt[0] if irt else None
    info.references = _msgids(header("References"))
    froms = _addr_list([header("From") or ""])
    info.from_addr = froms[0] if froms else ""
    if len(froms) != 1:
        problems.append("from_not_single")
    info.to_addrs = _addr_list([str(v) for v in msg.get_all("To") or []])
    info.cc_addrs = _addr_list([str(v) for v in msg.get_all("Cc") or []])
    reply_to = _addr_list([header("Reply-To") or ""])
    info.reply_to = reply_to[0] if len(reply_to) == 1 else None
    info.header_date = header("Date")
    if info.header_date:
        try:
            parsedate_to_datetime(info.header_date)
        except (TypeError, ValueError):
            problems.append("bad_date")
    texts: list[str] = []
    htmls: list[str] = []
    parts = msg.get_payload() if msg.is_multipart() else [msg]
    if not isinstance(parts, list):
        parts = [msg]
        problems.append("multipart_without_parts")
    # Top-level parts only: an attached message/rfc822 is an attachment, not body.
    for part in parts:
        if not isinstance(part, Message):
            continue
        ctype = part.get_content_type()
        disposition = (part.get("Content-Disposition") or "").split(";")[0].strip().lower()
        filename = part.get_filename()
        if part.is_multipart() and ctype.startswith("multipart/"):
            for sub in part.get_payload():
                if isinstance(sub, Message) and sub.get_content_type() == "text/plain":
                    texts.append(_text_of(sub))
                elif isinstance(sub, Message) and sub.get_content_type() == "text/html":
                    htmls.append(_text_of(sub))
            continue
        if disposition == "attachment" or filename or ctype == "message/rfc822":
            data = part.get_payload(decode=True)
            if not isinstance(data, bytes):
                data = part.as_bytes() if ctype == "message/rfc822" else b""
            name = filename or ("forwarded.eml" if ctype == "message/rfc822" else "attachment.bin")
            info.attachment_parts.append((name, ctype, data))
            info.attachment_meta.append(Attachment(name, ctype, len(data)))
        elif ctype == "text/plain":
            texts.append(_text_of(part))
        elif ctype == "text/html":
            htmls.append(_text_of(part))
    body = "\n".join(t for t in texts if t) or _strip_html("\n".join(htmls))
    if not body and not msg.is_multipart():
        body = raw.split(b"\r\n\r\n", 1)[-1].decode("utf-8", errors="replace")
    info.body = body.replace("\r\n", "\n")
