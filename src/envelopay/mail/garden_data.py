"""The garden's DATA reader: a message's content taken in a few reads, not line by line.

aiosmtpd reads DATA one line at a time, with a `readuntil` and its own bookkeeping per
line (about a quarter of the garden's CPU per delivery). This reader takes the stream in
chunks, each ending at the next ".\\r\\n" or at the stream reader's limit, and finds the
end of the data — a line holding only "." (RFC 5321 4.1.1.4) — where a chunk's ".\\r\\n"
follows a line end. Its answer is aiosmtpd's answer for the same bytes (`data_state`,
pure, applies aiosmtpd's per-line rules in aiosmtpd's order), so a peer cannot tell the
two apart:

- a line longer than `line_limit` octets with its CRLF: "500 Line too long" (RFC 5321
  4.5.3.1.6), answered after the whole message was read, as aiosmtpd does;
- more than `size_limit` octets of lines: "552 Too much mail data";
- whichever the stream reached first; within one line, a line too long to be read at
  all (longer than the limit before its CRLF) is refused before it is counted.

What is held never grows past `size_limit` plus a line: past that the verdict is known,
and the rest is read and dropped up to the end of the data. Dot-stuffing is undone
(RFC 5321 4.5.2).
"""

from __future__ import annotations

import asyncio
from typing import Literal

__all__ = ["DataState", "data_state", "read_data", "unstuff"]

DataState = Literal["ok", "too_long", "too_much"]
_END = b"\r\n.\r\n"  # a line's end, the ".", its own end


def data_state(data: bytes, line_limit: int, size_limit: int | None) -> DataState:
    """aiosmtpd's verdict on the DATA lines `data` (the end-of-data line excluded; the
    last line may be unfinished when the data was cut short past the size limit)."""
    lines = data.split(b"\r\n")
    if (not size_limit or len(data) <= size_limit) and max(map(len, lines)) + 2 <= line_limit:
        return "ok"
    state: DataState = "ok"
    count = 0
    for i, text in enumerate(lines):
        ended = i < len(lines) - 1
        if state == "ok" and len(text) > line_limit:  # too long to be read: refused, then counted
            state = "too_long"
        count += len(text) + (2 if ended else 0)
        if state == "ok" and size_limit and count > size_limit:
            state = "too_much"
        if state == "ok" and ended and len(text) + 2 > line_limit:
            state = "too_long"
    return state


def unstuff(content: bytes) -> bytes:
    """RFC 5321 4.5.2: the first "." of every line that starts with one is removed."""
    if content.startswith(b"."):
        content = content[1:]
    return content.replace(b"\r\n.", b"\r\n") if b"\r\n." in content else content


async def read_data(
    reader: asyncio.StreamReader, *, line_limit: int, size_limit: int | None
) -> tuple[bytes, DataState]:
    """One DATA's content (unstuffed; b"" unless "ok") and its state, read up to and
    including the end-of-data line and nothing after it (a pipelined command stays)."""
    parts: list[bytes] = []
    held = 0
    # Past this much the line that crossed the size limit is known whole, or known too
    # long: the verdict can be given, and nothing more need be held.
    enough = size_limit + line_limit + 3 if size_limit else None
    tail = b"\r\n"  # the last two octets taken: DATA starts at a line start
    verdict: DataState | None = None
    while True:
        try:
            chunk = await reader.readuntil(b".\r\n")
        except asyncio.LimitOverrunError as over:  # no ".\r\n" within the limit: take what is safe
            chunk = await reader.readexactly(over.consumed)
        else:
            if (tail + chunk)[-5:] == _END:  # the "." opens a line: the end of the data
                if verdict is not None:
                    return b"", verdict
                parts.append(chunk[:-3])
                data = b"".join(parts)
                state = data_state(data, line_limit, size_limit)
                return (unstuff(data), state) if state == "ok" else (b"", state)
        tail = (tail + chunk)[-2:]
        if verdict is not None:
            continue  # read and dropped
        parts.append(chunk)
        held += len(chunk)
        if enough is not None and held > enough:
            decided = data_state(b"".join(parts), line_limit, size_limit)
            verdict = "too_much" if decided == "ok" else decided  # more than the size: never ok
            parts = []
