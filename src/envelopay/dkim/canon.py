"""Splitting and relaxed canonicalization (RFC 6376 3.4) of CRLF message bytes."""

from __future__ import annotations

import re
from collections.abc import Iterable

from envelopay.errors import UsageError
from envelopay.protocol.headers import HeaderRefusal, read_headers

_WSP_RUN = re.compile(rb"[\t ]+")
_UNFOLD = re.compile(rb"\r?\n")


def to_crlf(raw: bytes) -> bytes:
    """Every line ending as CRLF (SMTP sends CRLF; signing must see the sent bytes)."""
    if b"\n" not in raw:
        return raw
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def split_message(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Split CRLF bytes into [(name, value-with-CRLF)] and the body (after the blank line),
    by the one header reader every component shares (protocol.headers).

    Raises UsageError when that reader refuses the header block."""
    read = read_headers(raw)
    if isinstance(read, HeaderRefusal):
        raise UsageError(f"header refused ({read.reason}): {read.detail}")
    return read.pairs(), read.body


def relaxed_header(name: bytes, value: bytes) -> bytes:
    """RFC 6376 3.4.2, including the trailing CRLF."""
    # Plain replaces where they give the regexes' answer (removing each CRLF, then each
    # LF left, is removing \r?\n); a regex call costs microseconds, ten per mail.
    value = value.replace(b"\r\n", b"").replace(b"\n", b"")
    if b"\t" in value or b"  " in value:
        value = _WSP_RUN.sub(b" ", value)
    value = value.strip(b" ")
    return name.lower().rstrip(b" \t") + b":" + value + b"\r\n"


def relaxed_body(body: bytes) -> bytes:
    """RFC 6376 3.4.4: WSP runs to one SP, none at line ends, no trailing empty lines."""
    # Byte replaces, not regexes: a regex scan over a mail's body tries every position
    # (about 30 us for a protocol mail's indented text). Tabs become spaces, runs halve
    # until none is left, and the one SP a line may then end in goes.
    body = body.replace(b"\t", b" ")
    while b"  " in body:
        body = body.replace(b"  ", b" ")
    body = body.replace(b" \r\n", b"\r\n")
    if body.endswith(b" "):  # a last line without CRLF may still end in WSP
        body = body.rstrip(b" ")
    while body.endswith(b"\r\n"):
        body = body[:-2]
    return body + b"\r\n" if body else b""


def _select(headers: list[tuple[bytes, bytes]], names: Iterable[str]) -> list[tuple[bytes, bytes]]:
    """Instances to hash, taking each name's occurrences from the bottom up (RFC 6376 5.4.2)."""
    positions: dict[bytes, list[int]] = {}
    for i, (name, _) in enumerate(headers):
        positions.setdefault(name.lower().rstrip(b" \t"), []).append(i)
    chosen: list[tuple[bytes, bytes]] = []
    for n in names:
        stack = positions.get(n.encode("ascii"))
        if stack:
            chosen.append(headers[stack.pop()])
    return chosen


def _fold_list(items: list[str], width: int = 68) -> str:
    lines: list[str] = []
    current = ""
    for item in items:
        piece = item if not current else ":" + item
        if current and len(current) + len(piece) > width:
            lines.append(current + ":")
            current = item
        else:
            current += piece
    lines.append(current)
    return "\r\n\t".join(lines)


def _fold_b64(value: str, first: int = 60, width: int = 72) -> str:
    chunks = [value[:first]] + [value[i : i + width] for i in range(first, len(value), width)]
    return "\r\n\t".join(c for c in chunks if c)
