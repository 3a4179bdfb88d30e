"""IMAP response lines read into values (pure): FETCH results, SEARCH UIDs, UIDVALIDITY,
as aioimaplib hands the lines over."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["parse_fetch", "search_uids", "uidvalidity"]

_FETCH_HEAD = re.compile(rb"^(\d+) FETCH \((.*)$", re.S)
_UID = re.compile(rb"\bUID (\d+)")
_FLAGS = re.compile(rb"\bFLAGS \(([^)]*)\)")
_LITERAL = re.compile(rb"\{(\d+)\}$")
_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")


def parse_fetch(lines: list[Any]) -> list[tuple[int, frozenset[str], bytes]]:
    """(uid, flags, raw) for each FETCH response in aioimaplib's line list.

    aioimaplib yields the line that opens a FETCH (ending in a ``{n}`` literal marker),
    then the literal as a bytearray, then the closing line (which may carry more items)."""
    out: list[tuple[int, frozenset[str], bytes]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        head = _FETCH_HEAD.match(bytes(line)) if isinstance(line, bytes | bytearray) else None
        if head is None or _LITERAL.search(bytes(line)) is None:
            i += 1
            continue
        meta = bytes(line)
        raw = bytes(lines[i + 1]) if i + 1 < len(lines) else b""
        tail = bytes(lines[i + 2]) if i + 2 < len(lines) and isinstance(lines[i + 2], bytes) else b""
        meta_all = meta + b" " + tail
        uid_m = _UID.search(meta_all)
        if uid_m is not None:
            flags_m = _FLAGS.search(meta_all)
            flags = frozenset(flags_m.group(1).decode(errors="replace").split()) if flags_m else frozenset()
            out.append((int(uid_m.group(1)), flags, raw))
        i += 3
    return out


def search_uids(lines: list[Any]) -> list[int]:
    # aioimaplib strips "* SEARCH"; the last line is the tagged completion text.
    uids: list[int] = []
    for line in lines[:-1]:
        words = bytes(line).split()
        if words and words[0].upper() == b"SEARCH":
            words = words[1:]
        if words and all(w.isdigit() for w in words):
            uids.extend(int(w) for w in words)
    return uids


def uidvalidity(lines: list[Any]) -> int | None:
    for line in lines:
        m = _UIDVALIDITY.search(bytes(line))
        if m:
            return int(m.group(1))
    return None
