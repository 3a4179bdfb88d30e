"""The one reading of a message's header block, shared by every reader of headers:
the parser, DKIM verification and signing, the enforcer and the garden. Sans-IO.

A message this module refuses is refused everywhere, so no two components can act on
two different ideas of the same message (issue 11, item 3: a parser that dropped an
mbox `From ` line and split on a bare CR, and a DKIM verifier that did neither, read
two different From fields from one message). The rules, decided once:

- line ends    CRLF, or a bare LF (files on Unix disks); a bare CR anywhere in the
               header block is refused (`bare_cr`): readers disagree on whether it ends
               a line.
- the block    ends at the first empty line; a message without one is all header.
- field line   RFC 5322 3.6.8: field-name = 1*ftext (printable US-ASCII but ":")
               followed at once by ":". Refused: a line without a colon (`not_a_field`),
               an mbox `From ` separator line (`mbox_from_line`; strip it before handing
               the bytes over, if you read an mbox), and white space before the colon,
               the obsolete `From : x` of RFC 5322 4.5 (`space_before_colon`), which
               dkimpy skips and others read as From.
- folding      RFC 5322 2.2.3: a line starting with SP or HTAB continues the field
               above; unfolding removes only the line breaks. Refused: a continuation
               before any field (`leading_continuation`) and a continuation line of
               white space only (`blank_continuation`, RFC 5322 3.2.2: it must not be
               generated, and some readers take it as the end of the header block).
- NUL          refused anywhere in the header block (`nul`).
- duplicates   a field of SINGLETON_HEADERS more than once is refused (`duplicate`):
               RFC 5322 3.6 allows one, and a second From or Subject is how signed mail
               gets spoofed (a signature covers one of them, readers take the other).
- 8-bit bytes  kept: `Field.value` reads them as UTF-8 (RFC 6532), undecodable bytes
               as U+FFFD. Meaning (addresses, encoded-words) is each reader's business,
               done on the same `Field`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.utils import getaddresses

__all__ = [
    "SINGLETON_HEADERS",
    "Field",
    "HeaderBlock",
    "HeaderRefusal",
    "addresses",
    "read_headers",
    "split_at_blank_line",
]

# RFC 5322 3.6 (at most one each), the MIME fields that decide how the body is read
# (RFC 2045), and the protocol's own type header.
SINGLETON_HEADERS: frozenset[str] = frozenset(
    {
        "date",
        "from",
        "sender",
        "reply-to",
        "to",
        "cc",
        "bcc",
        "message-id",
        "in-reply-to",
        "references",
        "subject",
        "mime-version",
        "content-type",
        "content-transfer-encoding",
        "x-envelopay-type",
    }
)

_FIELD_NAME = re.compile(rb"[\x21-\x39\x3b-\x7e]+")
_BLANK = re.compile(rb"[ \t]*")


@dataclass(frozen=True, slots=True)
class Field:
    """One header field as written.

    raw_name  -- the name's bytes as written (DKIM canonicalization needs them)
    raw_value -- the bytes after the colon, folded lines included, each line ending
                 in CRLF (a bare LF in the input is read as CRLF)
    """

    name: str  # lower-cased ("from")
    raw_name: bytes
    raw_value: bytes

    @property
    def value(self) -> str:
        """Unfolded (line breaks removed, white space kept), outer white space stripped,
        read as UTF-8 with undecodable bytes as U+FFFD."""
        return self.raw_value.replace(b"\r\n", b"").decode("utf-8", "replace").strip()


@dataclass(frozen=True, slots=True)
class HeaderBlock:
    """A header block every reader accepts, and the body after it (bytes as given)."""

    fields: tuple[Field, ...]
    body: bytes

    def get_all(self, name: str) -> list[Field]:
        lower = name.lower()
        return [f for f in self.fields if f.name == lower]

    def count(self, name: str) -> int:
        lower = name.lower()
        return sum(1 for f in self.fields if f.name == lower)

    def one(self, name: str) -> str | None:
        """The value of the first field called `name` (singletons occur at most once)."""
        lower = name.lower()
        for f in self.fields:
            if f.name == lower:
                return f.value
        return None

    def pairs(self) -> list[tuple[bytes, bytes]]:
        """[(raw name, raw value)] in order: the shape DKIM canonicalization works on."""
        return [(f.raw_name, f.raw_value) for f in self.fields]


@dataclass(frozen=True, slots=True)
class HeaderRefusal:
    """Why the header block is refused: a stable `reason` code (see the module rules),
    a human `detail`, and the 1-based line it was found on (0 for the whole block)."""

    reason: str
    detail: str
    line: int = 0
    partial: tuple[Field, ...] = ()  # the fields read before the refusal (all, for `duplicate`)
    field: str | None = None  # the field concerned, when there is one (`duplicate`)

    def one(self, name: str) -> str | None:
        """A field's value from `partial` when it occurs there exactly once: only ever for
        addressing the refusal itself, never for acting on the message."""
        lower = name.lower()
        found = [f for f in self.partial if f.name == lower]
        return found[0].value if len(found) == 1 else None


def split_at_blank_line(raw: bytes) -> tuple[bytes, bytes]:
    """(header block, body): the body starts after the first empty line (CRLF or LF)."""
    if raw.startswith(b"\r\n"):
        return b"", raw[2:]
    if raw.startswith(b"\n"):
        return b"", raw[1:]
    # The first LF followed by an empty line (LF or CRLF), found with two byte searches
    # (a regex scan tries every position): the blank line starts at that LF, or at the CR
    # before it.
    lf_lf, lf_crlf = raw.find(b"\n\n"), raw.find(b"\n\r\n")
    if lf_lf < 0 and lf_crlf < 0:
        return raw, b""
    at, width = (lf_lf, 2) if lf_crlf < 0 or 0 <= lf_lf < lf_crlf else (lf_crlf, 3)
    start = at - 1 if raw[at - 1 : at] == b"\r" else at
    return raw[:start], raw[at + width :]


def read_headers(raw: bytes) -> HeaderBlock | HeaderRefusal:
    """Read the header block of `raw` by the rules above: a HeaderBlock, or the refusal."""
    if type(raw) is bytes and len(raw) <= _MEMO_LARGEST:
        return _read_remembered(raw)
    return _read(raw)


# One mail is read here by several components in turn (the garden, DKIM, the parser,
# the evidence tap, the reply matcher), and the answer is immutable: the last few
# answers are kept, for mails up to 64 KiB (a protocol mail is a few KiB), so the
# memory held stays small whatever arrives.
_MEMO_LARGEST = 64 * 1024


@functools.lru_cache(maxsize=32)
def _read_remembered(raw: bytes) -> HeaderBlock | HeaderRefusal:
    return _read(raw)


# A well-formed block, field by field: a name, its colon, the rest of the line and any
# continuation lines, each line ending in LF (CRLFs are read as LF first). Used only when
# it covers the whole block; anything else is read line by line below, which finds the
# refusal and its line (the two agree on every block: tests/protocol/test_headers.py).
_WHOLE_FIELD = re.compile(rb"([\x21-\x39\x3b-\x7e]+):([^\n]*\n(?:[ \t][^\n]*\n)*)")
_BLANK_FOLD = re.compile(rb"\n[ \t]+\n")


def _read(raw: bytes) -> HeaderBlock | HeaderRefusal:
    head, body = split_at_blank_line(raw)
    if head.endswith(b"\n"):  # the last header line of a message without a body
        head = head[:-2] if head.endswith(b"\r\n") else head[:-1]
    if not head:
        return HeaderBlock((), body)
    return _read_whole(head, body) or _read_lines(head, body)


def _read_whole(head: bytes, body: bytes) -> HeaderBlock | None:
    """The common case at regex speed; None sends the block to `_read_lines`."""
    lf = head.replace(b"\r\n", b"\n") + b"\n"
    if b"\r" in lf or b"\x00" in lf or _BLANK_FOLD.search(lf) is not None:
        return None
    found = _WHOLE_FIELD.findall(lf)
    if sum(len(name) + len(value) + 1 for name, value in found) != len(lf):
        return None  # a line no field explains: refused, with its reason, line by line
    fields = tuple(Field(name.decode("ascii").lower(), name, value.replace(b"\n", b"\r\n"))
                   for name, value in found)
    return None if _first_duplicate(fields) else HeaderBlock(fields, body)


def _read_lines(head: bytes, body: bytes) -> HeaderBlock | HeaderRefusal:
    fields: list[Field] = []
    pending: list[bytes] = []  # the current field's value lines

    def close() -> None:
        if pending:
            last = fields[-1]
            fields[-1] = Field(last.name, last.raw_name, last.raw_value + b"".join(pending))
            pending.clear()

    def refuse(reason: str, detail: str, line: int) -> HeaderRefusal:
        close()
        return HeaderRefusal(reason, detail, line, tuple(fields))

    if b"\x00" in head:
        return HeaderRefusal("nul", "NUL byte in the header block")
    for number, line in enumerate(head.split(b"\n"), 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if b"\r" in line:
            return refuse("bare_cr", "a bare CR in a header line", number)
        if line[:1] in (b" ", b"\t"):
            if not fields:
                return refuse("leading_continuation", "the header block starts with a folded line", number)
            if _BLANK.fullmatch(line):
                return refuse("blank_continuation", "a folded line of white space only", number)
            pending.append(line + b"\r\n")
            continue
        colon = line.find(b":")
        name = line[:colon] if colon > 0 else b""
        if colon > 0 and _FIELD_NAME.fullmatch(name):
            close()
            fields.append(Field(name.decode("ascii").lower(), name, line[colon + 1 :] + b"\r\n"))
            continue
        if colon > 0 and _FIELD_NAME.fullmatch(name.rstrip(b" \t")):
            return refuse("space_before_colon", "white space between a field name and its colon", number)
        if line.startswith(b"From "):
            return refuse("mbox_from_line", "an mbox 'From ' separator line is not a header", number)
        return refuse("not_a_field", f"not a header field: {line[:60]!r}", number)
    close()
    twice = _first_duplicate(fields)
    if twice is not None:
        return HeaderRefusal("duplicate", f"duplicate {twice} header", 0, tuple(fields), twice)
    return HeaderBlock(tuple(fields), body)


def _first_duplicate(fields: Sequence[Field]) -> str | None:
    """The first field of SINGLETON_HEADERS given a second time, if any."""
    seen: set[str] = set()
    for f in fields:
        if f.name in SINGLETON_HEADERS:
            if f.name in seen:
                return f.name
            seen.add(f.name)
    return None


# ------------------------------------------------------------------ addresses

_ADDR = r'[^\s<>,;:"()@\[\]\\]+@[^\s<>,;:"()@\[\]\\]+'
# Fast paths for the two common shapes ("a@b" and "Name <a@b>" with a plain name);
# anything else (quotes, comments, groups, lists) goes through getaddresses.
_BARE_ADDR = re.compile(rf"\s*({_ADDR})\s*")
_NAMED_ADDR = re.compile(rf'[^<>,;:"()@\[\]\\]*<({_ADDR})>\s*')
_MAX_ADDRESS_HEADER = 4096


def addresses(value: str | None) -> list[str]:
    """The addresses of an address field's value (From, To), as every reader takes them.

    An address the stdlib parser assembles from pieces that are not one run of the
    value ("a@x.test folded" read as "a@x.testfolded") is no address: the value must
    contain each address as written."""
    if value is None:
        return []
    m = _BARE_ADDR.fullmatch(value) or _NAMED_ADDR.fullmatch(value)
    if m is not None:
        return [m.group(1)]
    if len(value) > _MAX_ADDRESS_HEADER:
        return []  # the stdlib address parser is slow (and recursive) on long hostile values
    try:
        found = [addr for _, addr in getaddresses([value]) if "@" in addr]
    except Exception:  # RecursionError on deeply nested comments, and the like: no address
        return []
    return [a for a in found if a in value]
