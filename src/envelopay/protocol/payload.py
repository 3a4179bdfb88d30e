"""Payload placement, after MIME: find the one JSON object in the parts a message
offers (SPEC.md "Payload placement"). Pure functions over decoded text; the MIME
walk and the transfer/charset decoding live in `parse`.

Order: the application/json part; else the text/plain parts (RFC 3676 flowed text
joined first); else the HTML parts turned to text. In text, `quoting.own_text`
removes what is quoted, forwarded, signature or list footer, then the first JSON
object with `v` or `type` is the payload (Unicode spaces outside its strings read
as spaces).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.flowed import is_flowed, unflow
from envelopay.protocol.outside_json import too_deep
from envelopay.protocol.parsed import Problem
from envelopay.protocol.quoting import own_text

__all__ = [
    "DECODER",
    "PayloadError",
    "TextLeaf",
    "extract",
    "find_object",
    "html_to_text",
    "leading_text",
    "leaf_text",
]

_TAG = re.compile(r"<[^<>]*>")
# Linear-time patterns only: `[^<>]*` stops at the next `<`, so "<<<<..." costs O(n).
_HIDDEN_OPEN = re.compile(r"<(script|style|head|blockquote)\b", re.IGNORECASE)
# Where a browser starts a new line: a break, a rule, and either end of a block element.
# Possessive `\s*+`: spaces after a `<` are never given back (`<\s*/?\s*` backtracked
# quadratically over a long run of them).
_BREAK_TAG = re.compile(r"<\s*+/?(br|hr|p|div|tr|li|h[1-6]|table)\b[^<>]*>", re.IGNORECASE)
# A line break in HTML source is a space on the page (Word wraps its source lines at a
# space, inside JSON strings too); other spaces are left as written, so a JSON string
# keeps its content.
_SOURCE_BREAK = re.compile(r"\r\n|[\r\n]")
_PRE_OPEN = re.compile(r"<pre\b", re.IGNORECASE)
# H1 (SPEC.md "Payload placement"): Outlook on the web and the new Outlook for Windows
# write a reply or forward as the new text, an empty `appendonsend` div, an <hr> and the
# `divRplyFwdMsg` header, then the original, NOT in a blockquote; a reply to such a
# reply prefixes the ids with `x_`. From either element on, the HTML is the original.
_OUTLOOK_ORIGINAL = re.compile(
    r"""<[A-Za-z][^<>]*?[\s"'/]id\s*=\s*["']?(?:x_)*(?:divRplyFwdMsg|appendonsend)\b""",
    re.IGNORECASE,
)
_ATTEMPT = re.compile(r'\{\s*"')
_MAX_JSON_ATTEMPTS = 256
# Spaces a rich-text editor puts where JSON wants U+0020: no-break (U+00A0, `&nbsp;`),
# the U+2000 block, narrow no-break, medium math, ideographic, zero-width and BOM.
_SPACE_CHARS = "\u00a0\u1680\u2000-\u200b\u202f\u205f\u3000\ufeff"
_UNICODE_SPACE = re.compile(f"[{_SPACE_CHARS}]")
_SPACES = frozenset("\u00a0\u1680\u202f\u205f\u3000\ufeff") | {chr(c) for c in range(0x2000, 0x200C)}


# JSON nested deeper than this is refused before decoding. The decoder's guard is the
# recursion limit, and a process that imported py-evm (the Base rail's eth-tester chain)
# has it at 100,000: a mail with 200,000 levels then overflowed the C stack (a segfault
# of the worker), where it used to be a RecursionError.
MAX_NESTING = 512


class PayloadError(Exception):
    """The payload stage failed; carries its single problem (always invalid_json)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.problem = Problem(OopsCode.INVALID_JSON, detail)


@dataclass(frozen=True, slots=True)
class TextLeaf:
    """A text part: `decode()` gives its text (raises ValueError when undecodable);
    `params` are its Content-Type parameters (format, delsp)."""

    decode: Callable[[], str]
    params: dict[str, str]


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Parsers disagree on which of two equal keys wins ({"amount": "1", "amount": "1000"}):
    # an ambiguity a signer and a verifier could read differently, so it is refused.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def _drop_hidden(text: str) -> str:
    """Remove script/style/head/blockquote elements (nesting counted; an unclosed one
    hides the rest), in one forward pass."""
    lower = text.lower()
    out: list[str] = []
    pos = 0
    while True:
        m = _HIDDEN_OPEN.search(text, pos)
        if m is None:
            out.append(text[pos:])
            break
        out.append(text[pos : m.start()])
        name = m.group(1).lower()
        opener = re.compile(rf"<{name}\b", re.IGNORECASE)
        depth, scan, close = 1, m.end(), -1
        while depth:
            if close < scan:  # find each closing tag once: the scan only moves forward
                close = lower.find("</" + name, scan)
                if close < 0:
                    return " ".join(out)
            nested = opener.search(text, scan, close)
            if nested is not None:
                depth, scan = depth + 1, nested.end()
            else:
                depth, scan = depth - 1, close + 2
        end = text.find(">", scan)
        if end < 0:
            break
        pos = end + 1
    return " ".join(out)


def _laid_out(segment: str) -> str:
    """HTML outside <pre> in the lines a browser shows: a source line break is a space,
    each block boundary is one line break, lines start at their first character (so a
    header block stays contiguous and `-- ` stays a signature line)."""
    segment = _TAG.sub("", _BREAK_TAG.sub("\n", _SOURCE_BREAK.sub(" ", segment)))
    # Line by line, not a regex over spaces and newlines (that backtracks quadratically
    # over a long run of spaces): blank lines dropped, each line stripped of " " and tab.
    lines = (line.strip(" \t") for line in segment.split("\n"))
    return html.unescape("\n".join(line for line in lines if line))


def _preformatted(segment: str) -> str:
    return html.unescape(_TAG.sub("", _BREAK_TAG.sub("\n", segment)))


def html_to_text(text: str) -> str:
    """HTML as the text its reader sees: Outlook's quoted original cut off (H1), hidden
    elements and blockquotes dropped, laid out in lines as a browser shows them (<pre>
    kept as written), tags removed, entities decoded (`&nbsp;` becomes U+00A0)."""
    original = _OUTLOOK_ORIGINAL.search(text)
    if original is not None:
        text = text[: original.start()]
    text = _drop_hidden(text)
    lower = text.lower()
    out: list[str] = []
    pos = 0
    while (m := _PRE_OPEN.search(text, pos)) is not None:
        end = lower.find("</pre", m.end())
        end = len(text) if end < 0 else end
        out += [_laid_out(text[pos : m.start()]), "\n", _preformatted(text[m.start() : end]), "\n"]
        pos = end
    out.append(_laid_out(text[pos:]))
    return "".join(out)


def _html_text(part: Callable[[], str]) -> str:
    return html_to_text(part())


def leaf_text(leaf: TextLeaf) -> str:
    """A text/plain part's text with RFC 3676 soft breaks joined."""
    text = leaf.decode()
    flowed, delsp = is_flowed(leaf.params)
    return unflow(text, delsp=delsp) if flowed else text


def _spaces_outside_strings(text: str, start: int, budget: int) -> str:
    """The object that opens at `text[start]` (a `{`), up to where it closes, with
    Unicode spaces outside its JSON strings read as U+0020 (inside strings they stay).
    At most `budget` characters are scanned."""
    out: list[str] = []
    depth, in_string, escaped = 0, False, False
    for ch in text[start : start + max(budget, 1)]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth <= 0:
                out.append(ch)
                break
        elif ch in _SPACES:
            ch = " "
        out.append(ch)
    return "".join(out)


def find_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The payload object in prose: (object, attempted).

    The payload is the first JSON object (raw_decode at each `{`) that has `v` or
    `type`; objects without either, and braces that start no JSON, are prose. A `{`
    followed by a JSON string that fails to decode is an attempted payload. Two
    payload-shaped objects are ambiguous: raises PayloadError."""
    found: dict[str, Any] | None = None
    attempted = False
    if too_deep(text, MAX_NESTING):
        raise PayloadError(f"JSON nested deeper than {MAX_NESTING} levels")
    start = text.find("{")
    attempts = 0
    spaced = _UNICODE_SPACE.search(text) is not None
    # Failed attempts can each scan far (nested unterminated arrays): bound the total work.
    budget = 4 * len(text) + 65536
    while start >= 0 and attempts < _MAX_JSON_ATTEMPTS:
        attempts += 1
        try:
            obj, end = DECODER.raw_decode(text, start)
        except Exception as exc:  # JSONDecodeError, RecursionError, int-too-long ValueError
            reached = exc.pos if isinstance(exc, json.JSONDecodeError) else len(text)
            budget -= max(reached - start, 1)
            retried = None
            if spaced:
                # Rich-text paste: U+00A0 where JSON has whitespace (rule T7).
                segment = _spaces_outside_strings(text, start, budget)
                budget -= len(segment)
                try:
                    obj, seg_end = DECODER.raw_decode(segment)
                    retried = obj, start + seg_end
                except Exception:  # still not JSON: the attempt stands as failed
                    retried = None
            if retried is None:
                attempted = attempted or _ATTEMPT.match(text, start) is not None
                if budget < 0:
                    raise PayloadError("too much text that starts JSON and does not parse") from exc
                start = text.find("{", start + 1)
                continue
            obj, end = retried
        if isinstance(obj, dict) and ("v" in obj or "type" in obj):
            if found is not None:
                raise PayloadError("the body holds more than one Envelopay JSON object")
            found = obj
        start = text.find("{", end)  # an object's inner braces belong to it
    return found, attempted or found is not None


def leading_text(plain: Sequence[TextLeaf], html_parts: Sequence[Callable[[], str]]) -> str:
    """The text a reader sees first: the first text/plain part (else the first HTML
    part as text); "" when there is none or it cannot be decoded."""
    try:
        if plain:
            return leaf_text(plain[0])
        if html_parts:
            return html_to_text(html_parts[0]())
    except ValueError:
        pass
    return ""


def extract(
    json_parts: Sequence[Callable[[], str]],
    plain: Sequence[TextLeaf],
    html_parts: Sequence[Callable[[], str]],
) -> dict[str, Any] | None:
    """Payload placement over decoded parts. Raises PayloadError (invalid_json)."""
    if json_parts:
        if len(json_parts) > 1:
            raise PayloadError("more than one application/json part")
        try:
            text = json_parts[0]().removeprefix("\ufeff")  # a BOM is not content
            if too_deep(text, MAX_NESTING):
                raise ValueError(f"nested deeper than {MAX_NESTING} levels")
            obj = DECODER.decode(text)
        except Exception as exc:  # ValueError, RecursionError
            raise PayloadError(f"the application/json part is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise PayloadError("the application/json part is not a JSON object")
        return obj
    # HTML is read only when there is no text/plain part (multipart/alternative gives both).
    texts: list[Callable[[], str]] = (
        [partial(leaf_text, leaf) for leaf in plain]
        if plain
        else [partial(_html_text, part) for part in html_parts]
    )
    attempted = False
    for get in texts:
        try:
            text = own_text(get())
        except ValueError as exc:
            raise PayloadError(f"undecodable body part: {exc}") from exc
        obj, tried = find_object(text)
        attempted = attempted or tried
        if obj is not None:
            return obj
    if attempted:
        raise PayloadError("the body starts a JSON object that does not parse")
    return None
