"""Subject grammar (spec v0.1.0, "Subject parsing"): `TYPE` or `TYPE | note`.

Pure functions over an already-decoded subject string. RFC 2047 decoding happens in
`decode_subject`, which never raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from typing import Literal

from envelopay.protocol.messages import EXTENSION_OF, SPEC_TYPES, MessageType

__all__ = [
    "KEYWORDS",
    "SUPPORTED_TYPES_TEXT",
    "SubjectForm",
    "classify_subject",
    "decode_subject",
    "format_subject",
    "is_plain_reply",
    "is_reply",
]

# The nine all-caps keywords, in the spec's order.
KEYWORDS: tuple[str, ...] = tuple(t.keyword for t in SPEC_TYPES)
SUPPORTED_TYPES_TEXT = ", ".join(KEYWORDS)
_BY_KEYWORD: dict[str, MessageType] = {t.keyword: t for t in SPEC_TYPES}
# "subject keywords beyond the nine are extensions": known only to a receiver that
# speaks the extension (SPEC.md "Status while working"); to everyone else unknown_type.
_EXTENSION_KEYWORDS: dict[str, MessageType] = {t.keyword: t for t in EXTENSION_OF}

# Spec: "If the subject matches ^[A-Z]+(\s*\|.*)?$ but the keyword isn't one of the nine
# types, reply OOPS with unknown_type". The same shape, split into keyword and note.
_SHAPE = re.compile(r"([A-Z]+)(?:[ \t]*\|(.*))?", re.DOTALL)
# v0.1.0: "No stripping — Re: and Fwd: prefixes mean the sender doesn't speak the
# protocol." We also treat Outlook's "Fw:" as a forward (decision, see SPEC.md).
_REPLY_OR_FORWARD = re.compile(r"(?:re|fwd?)[ \t]*:", re.IGNORECASE)
_RE_ONLY = re.compile(r"re[ \t]*:[ \t]*", re.IGNORECASE)
# A mailing list's subject tag (Mailman's `subject_prefix`, "[listname] " or
# "[listname 123] "): the list's decoration, not the sender's words (SPEC.md, rule S1).
# No colon inside, so "[Fwd: PAY]" is not a tag.
_LIST_TAG = re.compile(r"\[[^\[\]:\r\n]{1,64}\][ \t]*")
# Forwards that carry no `Fwd:` prefix: Alpine's "subject (fwd)" and the old
# "[Fwd: subject]" of Netscape-era clients (rule S2).
_FORWARD_MARK = re.compile(r"(?:.*\(fwd\)[ \t]*|\[fwd?[ \t]*:.*\])", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class SubjectForm:
    """What a subject says.

    protocol -- keyword-shaped (known keyword or not); False for ordinary mail
    keyword  -- the all-caps first token when protocol
    type     -- the MessageType when the keyword is one of the nine
    note     -- text after `|`, trimmed; None when there is no `|`
    reason   -- why a subject is not protocol (for summaries and tests)
    """

    protocol: bool
    keyword: str | None = None
    type: MessageType | None = None
    note: str | None = None
    reason: str | None = None


def decode_subject(value: str) -> tuple[str, bool]:
    """Decode RFC 2047 encoded-words; return (text, ok). Never raises.

    ok is False when an encoded-word could not be decoded (bad charset or payload);
    the raw value is returned then, which will not match the grammar."""
    if "=?" not in value:
        return value, True
    try:
        return str(make_header(decode_header(value))), True
    except Exception:  # the stdlib raises several types here; any of them means "undecodable"
        return value, False


def _strip_tag(text: str) -> str:
    m = _LIST_TAG.match(text)
    return text[m.end() :] if m is not None else text


def is_reply(subject: str | None) -> bool:
    """A `Re:` subject (after a list tag), not a forward: the lenient profile's cue."""
    if subject is None:
        return False
    text = _strip_tag(subject.strip())
    return _RE_ONLY.match(text) is not None and _FORWARD_MARK.fullmatch(text) is None


def is_plain_reply(subject: str | None) -> bool:
    """A `Re:` subject with no forward anywhere under its `Re:` chain (`Re: Fwd: x` is a
    reply to a forward): the cue for reading a reply in our thread by its JSON."""
    if not is_reply(subject):
        return False
    assert subject is not None
    text = _strip_tag(subject.strip())
    while (m := _RE_ONLY.match(text)) is not None:
        text = _strip_tag(text[m.end() :].strip())
    return _REPLY_OR_FORWARD.match(text) is None and _FORWARD_MARK.fullmatch(text) is None


def classify_subject(
    subject: str | None,
    *,
    re_prefix: Literal["v0.1", "v0.2"] = "v0.1",
    extensions: frozenset[str] = frozenset(),
) -> SubjectForm:
    """Apply the subject grammar to a decoded subject. An extension's keyword (WAIT,
    WHATSUP) is a type only when `extensions` names its extension."""
    if subject is None:
        return SubjectForm(False, reason="no Subject header")
    text = _strip_tag(subject.strip())
    if _FORWARD_MARK.fullmatch(text):
        return SubjectForm(False, reason="forwarded (Alpine `(fwd)` or `[Fwd: ...]`): not a request")
    if _REPLY_OR_FORWARD.match(text):
        if re_prefix == "v0.1":
            return SubjectForm(False, reason="Re:/Fwd: prefix: the sender does not speak the protocol")
        # v0.2.0: strip one or more `Re:`; a forward is never a request.
        while True:
            m = _RE_ONLY.match(text)
            if m is None:
                break
            text = _strip_tag(text[m.end() :].strip())
        if _REPLY_OR_FORWARD.match(text):
            return SubjectForm(False, reason="Fwd: prefix: a forwarded message is not a request")
    m = _SHAPE.fullmatch(text)
    if m is None or "\r" in text or "\n" in text:
        return SubjectForm(False, reason="subject is not `TYPE` or `TYPE | note`")
    keyword = m.group(1)
    raw_note = m.group(2)
    note = raw_note.strip() if raw_note is not None else None
    kind = _BY_KEYWORD.get(keyword)
    extra = _EXTENSION_KEYWORDS.get(keyword)
    if kind is None and extra is not None and EXTENSION_OF[extra] in extensions:
        kind = extra
    return SubjectForm(True, keyword=keyword, type=kind, note=note)


def format_subject(kind: MessageType, note: str | None) -> str:
    """`TYPE | note`, or `TYPE` when there is no note."""
    if note is None or not note.strip():
        return kind.keyword
    return f"{kind.keyword} | {note.strip()}"
