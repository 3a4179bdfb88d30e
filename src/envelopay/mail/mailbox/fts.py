"""From a search regex to a full-text query for its candidates (pure).

The index's FTS5 table (unicode61 tokens: letters and digits, case and diacritics
folded) says which messages hold a token or a token prefix. Each literal word of the
pattern whose left edge is a token boundary (the pattern's first word, or one after a
boundary) becomes a term: a whole token when a boundary follows it (a literal
non-alphanumeric character, `\\b`, `$`, `\\s`, `\\W`), else a prefix (`"word"*`). All
terms must be present (AND); the regex then runs on those candidates only.

Any subset of those terms still finds every candidate. A whole-token term streams
newest first; a prefix term, as SQLite's FTS5 (3.40) runs it, merges the posting list of
every token with that prefix before its first row. So the index expands a prefix into
the whole tokens it covers (`Expand`, from its own vocabulary; `"a" OR "b"` streams) when
they are few, and `narrow` keeps the cheapest terms (the regex, or `check`'s exact
test, decides the rest).

So `search` matches where the pattern's first literal word starts a word of the text:
`invoice` finds "invoice" and "invoices", not "reinvoice" (a token index cannot look
inside a token; SPEC.md states this). A pattern without a literal word (`\\d+`, `a|b`)
gives None: the caller walks messages newest first instead.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import zlib
from collections.abc import Callable
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import NamedTuple

__all__ = [
    "EXPANDED",
    "PREFIX",
    "SEPARATE",
    "WHOLE",
    "Expand",
    "Rendered",
    "Term",
    "cheapest",
    "fold",
    "fts_query",
    "join",
    "narrow",
    "nfc",
    "render",
    "starts_a_word",
    "starts_a_word_z",
    "successor",
    "word_start",
    "words_terms",
]

_BOUND_AT = {sre.AT_BOUNDARY, sre.AT_BEGINNING, sre.AT_BEGINNING_STRING, sre.AT_END, sre.AT_END_STRING}
_NON_WORD = {sre.CATEGORY_SPACE, sre.CATEGORY_NOT_WORD}


def _bounding(op: object, arg: object) -> bool:
    """Whether this pattern item only matches at a token edge or non-token characters."""
    if op is sre.AT:
        return arg in _BOUND_AT
    if op is sre.IN:
        return isinstance(arg, list) and all(o is sre.CATEGORY and a in _NON_WORD for o, a in arg)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT) and isinstance(arg, tuple):
        lo, _hi, inner = arg
        return lo >= 1 and all(_bounding(o, a) for o, a in inner)
    return False


class Term(NamedTuple):
    """One literal word of a pattern: a whole token, or a prefix (the word may go on),
    limited to an FTS5 column filter when `columns` is set."""

    word: str
    prefix: bool
    columns: str = ""


# A prefix word -> the whole index tokens it covers (possibly none), or None when the
# index cannot say cheaply (too many, or a word the tokenizer would not keep whole).
Expand = Callable[[str], "list[str] | None"]


def _quote(word: str, prefix: bool) -> str:
    return '"' + word.replace('"', '""') + '"' + ("*" if prefix else "")


# How a rendered term runs: WHOLE and EXPANDED stream newest first (an OR of a few whole
# tokens merges them row by row), PREFIX merges its whole posting list first.
WHOLE, EXPANDED, PREFIX = 0, 1, 2
Rendered = tuple[str, int]  # (MATCH expression, WHOLE | EXPANDED | PREFIX)


def render(term: Term, expand: Expand | None = None) -> Rendered:
    """The MATCH expression of one term and how it runs: a prefix becomes `"a" OR "b"`
    once `expand` names the tokens it covers."""
    covered = expand(term.word) if term.prefix and expand is not None else None
    if not term.prefix:
        expr, kind = _quote(term.word, False), WHOLE
    elif covered is None:
        expr, kind = _quote(term.word, True), PREFIX
    elif not covered:  # no token has this prefix: the prefix query ends at once, empty
        expr, kind = _quote(term.word, True), WHOLE
    else:
        expr, kind = " OR ".join(_quote(t, False) for t in covered), EXPANDED
        if len(covered) > 1:
            expr = f"({expr})"
    return (f"{term.columns} : {expr}" if term.columns else expr), kind


def _run_terms(run: str, left: bool, right: bool) -> list[Term]:
    """Terms from one literal run, given whether its edges are token boundaries (a word
    that may continue a token on its left gives no term)."""
    terms: list[Term] = []
    for m in re.finditer(r"[^\W_]+", run):
        if m.start() > 0 or left:
            terms.append(Term(m.group(), prefix=not (m.end() < len(run) or right)))
    return terms


def fts_query(pattern: str, *, narrowed: bool = False, expand: Expand | None = None) -> str | None:
    """An FTS5 MATCH expression every text the regex matches satisfies, or None;
    `narrowed`: only the terms `narrow` keeps; `expand`: prefixes as their tokens."""
    terms = _terms(pattern)
    return join(cheapest(terms, expand) if narrowed else [render(t, expand) for t in terms])


def join(rendered: list[Rendered]) -> str | None:
    """Rendered terms ANDed into one MATCH expression (None: no term)."""
    return " AND ".join(e for e, _ in rendered) or None


def _terms(pattern: str) -> list[Term]:
    try:
        items = list(sre_parse.parse(pattern))
    except re.error:
        return []
    terms: list[Term] = []
    run: list[str] = []
    left = True  # the pattern's first word starts a word (the rule above)
    for op, arg in items:
        if op is sre.LITERAL:
            run.append(chr(arg))
            continue
        bound = _bounding(op, arg)
        if run:
            terms += _run_terms("".join(run), left, bound)
            run = []
        left = bound
    if run:
        terms += _run_terms("".join(run), left, False)
    return list(dict.fromkeys(terms))


def narrow(rendered: list[Rendered]) -> list[Rendered]:
    """The terms of the cheapest kind present: the whole tokens when there is one (each
    is as selective as the word written), else the expanded prefixes, else every term.
    A common word's prefix (`test` of an address) would only slow the walk that a whole
    token already drives."""
    best = min((kind for _, kind in rendered), default=WHOLE)
    return [r for r in rendered if r[1] == best]


def cheapest(terms: list[Term], expand: Expand | None = None) -> list[Rendered]:
    """`narrow` of the rendered terms, not asking `expand` when a whole token drives."""
    if any(not t.prefix for t in terms):
        expand = None
    return narrow([render(t, expand) for t in terms])


def words_terms(text: str, columns: str) -> list[Term]:
    """The terms of a plain text (`check --from/--subject/--contains`), each limited to
    `columns` ("from_addr", "{subject body}")."""
    return [t._replace(columns=columns) for t in _terms(re.escape(text))]


def nfc(text: str) -> str:
    """`text` in Unicode NFC: the form every exact text test compares (the same words typed
    composed or decomposed, "é" or "e" + U+0301, are one text). ASCII is NFC already."""
    return text if text.isascii() else unicodedata.normalize("NFC", text)


def fold(text: str) -> str:
    """`text` as `check`'s filters compare it: lowercased, in NFC (lowercasing can
    decompose, so NFC after)."""
    return nfc(text.lower())


@functools.lru_cache(maxsize=64)
def word_start(needle: str) -> re.Pattern[str]:
    """The exact test of `check`'s text filters: `needle` (`fold`ed) found in a `fold`ed
    text where a word starts, when its first character is a letter or digit
    (anywhere, when it begins with another character)."""
    lead = "(?<![^\\W_])" if needle[:1].isalnum() else ""
    return re.compile(lead + re.escape(needle))


# The unicode61 tokenizer always separates on ASCII non-alphanumerics: so the UTF-8 text,
# those bytes made spaces, splits into runs where an all-ASCII run is one token
# (lowercased) and any other run goes through SQLite's own tokenizer (`index.MailIndex._tokens`):
# the vocabulary folds exactly as the index does.
SEPARATE = bytes(c if chr(c).isalnum() or c >= 0x80 else 0x20 for c in range(256))


def starts_a_word(needle: str, text: str) -> bool:
    """Whether `needle` starts a word of `text`, folded (the SQL function ws)."""
    return word_start(needle).search(fold(text)) is not None


def starts_a_word_z(needle: str, head: str, z: bytes) -> bool:
    """starts_a_word over a body kept as `head` and the zlib-compressed rest `z` (wsz)."""
    return starts_a_word(needle, head + zlib.decompress(z).decode())


def successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (code point order,
    which is SQLite's BINARY order of UTF-8); None after U+10FFFF (no token has it)."""
    nxt = ord(prefix[-1]) + 1
    if 0xD800 <= nxt <= 0xDFFF:  # no string holds a surrogate
        nxt = 0xE000
    return prefix[:-1] + chr(nxt) if nxt <= 0x10FFFF else None
