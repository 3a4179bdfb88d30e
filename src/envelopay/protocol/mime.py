"""Byte-level MIME for payload placement: split a multipart body at its delimiter
lines, find a part's header block, undo a transfer encoding, decode a charset. Pure
and never raising except where stated; headers are read by `parse`."""

from __future__ import annotations

import binascii
import re

__all__ = ["decode_text", "decode_transfer", "head_block", "split_multipart", "strip_last_newline"]

_HEADER_END = re.compile(rb"\r?\n\r?\n")
_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]")


def split_multipart(body: bytes, boundary: str, *, max_parts: int) -> list[bytes]:
    """The body parts between delimiter lines (RFC 2046 section 5.1.1): a line that is
    `--boundary` (a part starts) or `--boundary--` (the end), trailing blanks allowed;
    the preamble and epilogue are dropped, a missing close delimiter tolerated. Found
    with bytes.find, so the cost is in C however many lines the parts have."""
    delim = b"--" + boundary.encode("utf-8", "replace")
    parts: list[bytes] = []
    start: int | None = None  # where the current part's content begins
    pos = body.find(delim)
    while pos >= 0:
        at_line_start = pos == 0 or body[pos - 1] in (10, 13)
        lf = body.find(b"\n", pos)
        if lf < 0:
            lf = len(body)
        cr = body.find(b"\r", pos, lf)
        end = cr if cr >= 0 else lf
        after = end + 2 if body[end : end + 2] == b"\r\n" else end + 1
        rest = body[pos + len(delim) : end].rstrip(b" \t")
        if at_line_start and rest in (b"", b"--"):
            if start is not None:
                parts.append(body[start:pos])
            if rest == b"--" or len(parts) >= max_parts:
                return parts
            start = min(after, len(body))
        pos = body.find(delim, max(after, pos + 1))
    if start is not None:
        parts.append(body[start:])
    return parts


def strip_last_newline(data: bytes) -> bytes:
    # The CRLF before a boundary delimiter belongs to the delimiter (RFC 2046 5.1.1).
    if data.endswith(b"\r\n"):
        return data[:-2]
    if data.endswith(b"\n"):
        return data[:-1]
    return data


def head_block(chunk: bytes) -> bytes:
    """A part's header block (up to the first blank line), as bytes."""
    if chunk.startswith((b"\r\n", b"\n")):
        return b""
    m = _HEADER_END.search(chunk)
    return chunk if m is None else chunk[: m.start()]


def decode_transfer(data: bytes, cte: str) -> bytes:
    """Undo a Content-Transfer-Encoding (lowercase name); 7bit/8bit/binary/unknown pass
    through. Raises ValueError on base64 that cannot be decoded (missing padding is
    tolerated)."""
    if cte == "base64":
        compact = _NOT_BASE64.sub(b"", data).rstrip(b"=")
        compact += b"=" * (-len(compact) % 4)
        try:
            return binascii.a2b_base64(compact)
        except binascii.Error as exc:
            raise ValueError(f"bad base64: {exc}") from exc
    if cte == "quoted-printable":
        return binascii.a2b_qp(data)
    return data


def decode_text(data: bytes, charset: str) -> str:
    """Bytes in a declared charset as text; undecodable bytes become U+FFFD."""
    charset = charset.strip().lower() or "utf-8"
    if charset in ("us-ascii", "ascii"):
        charset = "utf-8"  # a superset; mislabelled 8-bit mail is common
    try:
        return data.decode(charset, "replace")
    except Exception:  # unknown charset, or a non-text codec ("hex", "rot13", ...): read as UTF-8
        return data.decode("utf-8", "replace")
