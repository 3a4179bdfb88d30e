"""RFC 3676 `format=flowed` text: decode what Thunderbird (and others) send, and
encode it (for vectors and round-trip tests). Pure functions over decoded text."""

from __future__ import annotations

import re

__all__ = ["flow", "is_flowed", "unflow"]

_LINE_SPLIT = re.compile(r"\r\n|\n|\r")
_SIG = "-- "


def is_flowed(params: dict[str, str]) -> tuple[bool, bool]:
    """(flowed, delsp) from a text/plain part's Content-Type parameters.

    RFC 3676 section 4.1: `format=flowed`; `DelSp=yes` (section 4.2) says the space
    before a soft break was added by the sender and is not content."""
    flowed = params.get("format", "").strip().lower() == "flowed"
    return flowed, flowed and params.get("delsp", "").strip().lower() == "yes"


def _prefix(depth: int) -> str:
    return ">" * depth + " " if depth else ""


def unflow(text: str, *, delsp: bool) -> str:
    """Join soft-broken lines into the paragraphs the sender wrote.

    RFC 3676 section 4.2: a line ending in a space is flowed (continues on the next),
    except the signature separator `-- `; section 4.4: one leading space is stuffing;
    section 4.5: the quote depth is the count of leading `>`, and lines of different
    depths are never joined. Quoted lines keep a `> ` prefix so the quote rules see them."""
    out: list[str] = []
    pending: list[str] = []
    pending_depth = 0
    for line in _LINE_SPLIT.split(text):
        depth = len(line) - len(line.lstrip(">"))
        content = line[depth:]
        if content.startswith(" "):
            content = content[1:]  # space-stuffing (or the space after quote marks)
        flowed = content.endswith(" ") and content != _SIG
        if pending and depth != pending_depth:
            # A flowed line followed by another depth is improperly flowed: a hard break.
            out.append(_prefix(pending_depth) + "".join(pending))
            pending = []
        if flowed and delsp:
            content = content[:-1]
        pending.append(content)
        pending_depth = depth
        if not flowed:
            out.append(_prefix(depth) + "".join(pending))
            pending = []
    if pending:
        out.append(_prefix(pending_depth) + "".join(pending))
    return "\n".join(out)


def _stuff(line: str) -> str:
    # RFC 3676 section 4.4: lines starting with a space, `>` or "From " are stuffed.
    return " " + line if line.startswith((" ", ">", "From ")) else line


def flow(text: str, *, width: int = 72, delsp: bool = False) -> str:
    """Encode unquoted text as format=flowed with soft breaks near `width`.

    Without DelSp a line breaks after a space (the space stays as content); with
    DelSp it may break anywhere, adding a space the receiver deletes. Trailing spaces
    on the sender's own lines are trimmed (section 4.2: they would read as flowed)."""
    out: list[str] = []
    for line in _LINE_SPLIT.split(text):
        line = line.rstrip(" ")
        while len(line) > width:
            cut = _break_at(line, width, delsp)
            if cut is None:
                break
            chunk, line = line[:cut], line[cut:]
            out.append(_stuff(chunk + " " if delsp else chunk))
        out.append(_stuff(line))
    return "\r\n".join(out)


def _break_at(line: str, width: int, delsp: bool) -> int | None:
    """Where to cut `line` (chunk = line[:cut]); None when it cannot be broken."""
    if delsp:
        # Any position works, but a chunk whose written form is `-- ` reads as a signature.
        return width if line[:width] != "--" else width + 1
    for cut in range(width, 0, -1):
        if line[cut - 1] == " " and line[:cut] != _SIG:
            return cut
    for cut in range(width + 1, len(line)):  # a long word: break at the next space
        if line[cut - 1] == " " and line[:cut] != _SIG:
            return cut
    return None
