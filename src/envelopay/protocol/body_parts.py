"""Payload placement's MIME walk: which parts of a message may hold its JSON object,
its text or its HTML, each decoded only when read (the rest of placement is in
`payload`). Never descends into an attached `message/*` part: a forward is not a
request. Containers nest at most _MAX_DEPTH deep and hold at most _MAX_PARTS parts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from envelopay.protocol.mime import (
    decode_text,
    decode_transfer,
    head_block,
    split_multipart,
    strip_last_newline,
)
from envelopay.protocol.parsed import Problem
from envelopay.protocol.payload import PayloadError, TextLeaf, extract

_LINE_SPLIT = re.compile(r"\r\n|\n|\r")
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_PARAM = re.compile(r';\s*([!#$%&\'*+\-.^_`|~0-9A-Za-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)')

_MAX_DEPTH = 8
_MAX_PARTS = 256


@dataclass(slots=True)
class _Part:
    headers: dict[str, list[str]]
    body: bytes


@dataclass(slots=True)
class _Payload:
    json_parts: list[_Part] = field(default_factory=list)
    # Everything else in document order: a leaf part, or the raw bytes (and depth) of a
    # part that cannot be or hold a JSON part, read only if no JSON part wins.
    others: list[_Part | tuple[bytes, int]] = field(default_factory=list)

    def text_parts(self) -> tuple[list[_Part], list[_Part]]:
        """(text/plain, text/html) body parts, in order; attachments and others dropped."""
        plain: list[_Part] = []
        html_parts: list[_Part] = []
        for leaf in self.others:
            part = leaf if isinstance(leaf, _Part) else _Part(*_leaf_split(leaf[0]))
            mtype, _ = _content_type(part.headers)
            if mtype.startswith("multipart/") and not isinstance(leaf, _Part):
                inner = _Payload()  # a container left for later: walk it now, for its text
                _collect(part.headers, part.body, inner, leaf[1])
                more_plain, more_html = inner.text_parts()
                plain += more_plain
                html_parts += more_html
                continue
            disposition = (_one(part.headers, "content-disposition") or "").split(";")[0].strip().lower()
            if disposition == "attachment" or mtype.startswith("message/"):
                continue  # an attached text file is not the body; a forward is not a request
            if mtype == "text/plain":
                plain.append(part)
            elif mtype == "text/html":
                html_parts.append(part)
        return plain, html_parts


class _Stop(Exception):
    """Internal: a stage failed; carries its single problem."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


# ---------------------------------------------------------------- headers


def _split_headers(raw: bytes) -> tuple[dict[str, list[str]], bytes]:
    """Header block -> {lowercase name: [unfolded values]}, and the body bytes."""
    m = _HEADER_END.search(raw)
    if raw.startswith((b"\r\n", b"\n")):
        head, body = b"", raw[2 if raw.startswith(b"\r\n") else 1 :]
    elif m is None:
        head, body = raw, b""
    else:
        head, body = raw[: m.start()], raw[m.end() :]
    text = head.decode("utf-8", "replace")
    # Values are kept as lists of folded pieces and joined once: linear in the header size.
    pieces: dict[str, list[list[str]]] = {}
    current: list[str] | None = None
    lines = _LINE_SPLIT.split(text)
    if lines and lines[0].startswith("From "):  # an mbox separator line, not a header
        lines = lines[1:]
    for line in lines:
        if line[:1] in (" ", "\t"):
            if current is not None:
                current.append(line)
            continue
        colon = line.find(":")
        if colon <= 0:
            current = None  # a malformed line: ignored, as is any continuation of it
            continue
        current = [line[colon + 1 :]]
        pieces.setdefault(line[:colon].rstrip().lower(), []).append(current)
    headers = {name: ["".join(p) for p in values] for name, values in pieces.items()}
    return headers, body


def _one(headers: dict[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    if not values:
        return None
    return values[0].strip()


def _content_type(headers: dict[str, list[str]]) -> tuple[str, dict[str, str]]:
    value = _one(headers, "content-type")
    if value is None:
        return "text/plain", {}
    semi = value.find(";")
    mtype = (value if semi < 0 else value[:semi]).strip().lower()
    params: dict[str, str] = {}
    if semi >= 0:
        for pm in _PARAM.finditer(value[semi:]):
            v = pm.group(2)
            if v.startswith('"') and v.endswith('"') and len(v) >= 2:
                v = re.sub(r"\\(.)", r"\1", v[1:-1])
            params.setdefault(pm.group(1).lower(), v)
    if "/" not in mtype:
        mtype = "text/plain"  # RFC 2045 section 5.2: an invalid type means text/plain
    return mtype, params


# ---------------------------------------------------------------- MIME


def _collect(headers: dict[str, list[str]], body: bytes, out: _Payload, depth: int) -> None:
    mtype, params = _content_type(headers)
    if mtype.startswith("multipart/"):
        boundary = params.get("boundary")
        if not boundary or depth >= _MAX_DEPTH:
            return
        for chunk in split_multipart(body, boundary, max_parts=_MAX_PARTS):
            # A JSON part's Content-Type names "json" literally (type and subtype are
            # tokens), and a container's names "multipart": a part whose header block
            # names neither, or a container with no "json" anywhere in it, holds no JSON
            # part, so its headers are read only if no JSON part wins (the fast path).
            head = head_block(chunk).lower()
            container = b"multipart" in head
            if (container and b"json" not in chunk.lower()) or (not container and b"json" not in head):
                out.others.append((chunk, depth + 1))
                continue
            sub_headers, sub_body = _leaf_split(chunk)
            _collect(sub_headers, sub_body, out, depth + 1)
        return
    if mtype.startswith("message/"):
        return  # never descend into an attached message: a forward is not a request
    part = _Part(headers, body)
    if mtype == "application/json" or (mtype.startswith("application/") and mtype.endswith("+json")):
        out.json_parts.append(part)
        return
    out.others.append(part)


def _leaf_split(chunk: bytes) -> tuple[dict[str, list[str]], bytes]:
    sub_headers, sub_body = _split_headers(chunk)
    return sub_headers, strip_last_newline(sub_body)


def _decode_part(part: _Part) -> str:
    """Transfer-decode and charset-decode a leaf part. Raises ValueError when undecodable."""
    cte = (_one(part.headers, "content-transfer-encoding") or "7bit").lower()
    return decode_text(decode_transfer(part.body, cte), _content_type(part.headers)[1].get("charset", ""))


def _parts(
    headers: dict[str, list[str]], body: bytes, *, text: bool = False
) -> tuple[list[Any], list[TextLeaf], list[Any]]:
    """(JSON parts, text/plain leaves, HTML parts), each decoded only when called. The
    text parts are not even listed when a JSON part wins, unless `text` asks for them."""
    found = _Payload()
    _collect(headers, body, found, 0)
    json_parts = [partial(_decode_part, p) for p in found.json_parts]
    if found.json_parts and not text:
        return json_parts, [], []
    plain, html_parts = found.text_parts()
    return (
        json_parts,
        [TextLeaf(partial(_decode_part, p), _content_type(p.headers)[1]) for p in plain],
        [partial(_decode_part, p) for p in html_parts],
    )


def _extract_body(headers: dict[str, list[str]], body: bytes) -> dict[str, Any] | None:
    """Payload placement: the MIME walk here, the rest in `payload`. Raises _Stop."""
    try:
        return extract(*_parts(headers, body))
    except PayloadError as err:
        raise _Stop(err.problem) from err
