"""From a search regex to a full-text query for its candidates (pure).

The index's FTS5 table (unicode61 tokens: letters and digits, case and diacritics
folded) says which messages hold a token or a token prefix. Each literal word of the
pattern whose left edge is a token boundary (the pattern's first word, or one after a
boundary) becomes a term: a whole token when a boundary follows it (a literal
non-alphanumeric character, `\\b`, `$`, `\\s`, `\\W`), else a prefix (`"word"*`). All
terms must be present (AND); the regex then runs on those candidates only.

Any subset of those terms still finds every candidate, and a prefix term costs its
whole posting list (FTS5 merges every token with that prefix before the first row),
while a whole-token term streams newest first: so `narrow` keeps the whole-token terms
when there is one (the regex, or `check`'s exact test, decides the rest).

So `search` matches where the pattern's first literal word starts a word of the text:
`invoice` finds "invoice" and "invoices", not "reinvoice" (a token index cannot look
inside a token; SPEC.md states this). A pattern without a literal word (`\\d+`, `a|b`)
gives None: the caller walks messages newest first instead.
"""

from __future__ import annotations

import functools
import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

__all__ = ["fts_query", "narrow", "word_start", "words_query", "words_terms"]

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


def _quote(word: str, prefix: bool) -> str:
    return '"' + word.replace('"', '""') + '"' + ("*" if prefix else "")


def _run_terms(run: str, left: bool, right: bool) -> list[str]:
    """Terms from one literal run, given whether its edges are token boundaries (a word
    that may continue a token on its left gives no term)."""
    terms: list[str] = []
    for m in re.finditer(r"[^\W_]+", run):
        if m.start() > 0 or left:
            terms.append(_quote(m.group(), prefix=not (m.end() < len(run) or right)))
    return terms


def fts_query(pattern: str, *, narrowed: bool = False) -> str | None:
    """An FTS5 MATCH expression every text the regex matches satisfies, or None;
    `narrowed`: only the terms `narrow` keeps."""
    terms = _terms(pattern)
    return " ".join(narrow(terms) if narrowed else terms) or None


def _terms(pattern: str) -> list[str]:
    try:
        items = list(sre_parse.parse(pattern))
    except re.error:
        return []
    terms: list[str] = []
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


def narrow(terms: list[str]) -> list[str]:
    """The whole-token terms, when there is one (they stream); else every term."""
    whole = [t for t in terms if not t.endswith("*")]
    return whole or terms


def words_terms(text: str, columns: str) -> list[str]:
    """The MATCH terms for a plain text (`check --from/--subject/--contains`), each
    limited to `columns` ("from_addr", "{subject body}")."""
    return [f"{columns} : {t}" for t in _terms(re.escape(text))]


def words_query(text: str, columns: str = "") -> str | None:
    """The MATCH expression for a plain text, each term limited to `columns` when given."""
    terms = _terms(re.escape(text))
    if columns:
        terms = [f"{columns} : {t}" for t in terms]
    return " ".join(terms) or None


@functools.lru_cache(maxsize=64)
def word_start(needle: str) -> re.Pattern[str]:
    """The exact test of `check`'s text filters: `needle` (lowercased) found in a
    lowercased text where a word starts, when its first character is a letter or digit
    (anywhere, when it begins with another character)."""
    lead = "(?<![^\\W_])" if needle[:1].isalnum() else ""
    return re.compile(lead + re.escape(needle))
