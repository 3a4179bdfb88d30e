"""Parse raw RFC 5322 bytes into a `Parsed` value. Never raises, whatever the bytes.

The fast path parses headers by hand (split at the first blank line, unfold, decode
only the headers the protocol uses) and walks only MIME containers, never an attached
`message/*` part: a forwarded message is not a request.

Stages, each of which can stop the message with exactly one OOPS code (the
precedence of SPEC.md "Validation and OOPS precedence"):

1. headers   duplicate singleton headers, CR/LF in decoded values -> invalid_field
2. subject   grammar; an unknown keyword -> unknown_type
3. payload   find the one JSON object (JSON part, text, HTML) -> invalid_json
4. envelope  `v` and `type` present and well formed -> missing_field / invalid_field
5. version   major.minor supported -> unsupported_version
6. type      body type vs subject type -> type_mismatch
7. fields    the model validates -> missing_wallet > missing_field > invalid_field

An OOPS that fails any stage is invalid and answers nothing (never OOPS an OOPS).
"""

from __future__ import annotations

import binascii
import html
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import SUPPORTED_TYPES_TEXT, classify_subject, decode_subject
from envelopay.protocol.headers import SINGLETON_HEADERS, Field, HeaderRefusal, read_headers
from envelopay.protocol.headers import addresses as _addresses
from envelopay.protocol.messages import (
    SUPPORTED_VERSIONS,
    Message,
    MessageType,
    Which,
    model_for,
)
from envelopay.protocol.parsed import Parsed, Problem

__all__ = ["SINGLETON_HEADERS", "ParseOptions", "parse"]

# SINGLETON_HEADERS (protocol.headers) is re-exported: the one list every reader refuses twice.
# Headers whose decoded value we read; CR/LF in any of them is refused.
_USED_HEADERS = ("subject", "from", "to", "message-id", "in-reply-to", "references", "x-envelopay-type")

_PROBLEM_ORDER: dict[OopsCode, int] = {
    OopsCode.MISSING_WALLET: 0,
    OopsCode.MISSING_FIELD: 1,
    OopsCode.INVALID_FIELD: 2,
}

_VERSION = re.compile(r"([0-9]{1,9})\.([0-9]{1,9})(?:\.[0-9]{1,9})?(?:[-+][0-9A-Za-z.-]{1,64})?")
_LINE_SPLIT = re.compile(r"\r\n|\n|\r")
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_PARAM = re.compile(r';\s*([!#$%&\'*+\-.^_`|~0-9A-Za-z]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^;\s]*)')
_TAG = re.compile(r"<[^<>]*>")
# Linear-time patterns only: `[^<>]*` stops at the next `<`, so "<<<<..." costs O(n).
_HIDDEN_OPEN = re.compile(r"<(script|style|head|blockquote)\b", re.IGNORECASE)
_BREAK_TAG = re.compile(r"<\s*(br|/p|/div|/tr|/li|/h[1-6])\b[^<>]*>", re.IGNORECASE)
_SIG = ("-- ", "--")
_ATTEMPT = re.compile(r'\{\s*"')

_MAX_DEPTH = 8
_MAX_PARTS = 256
_MAX_JSON_ATTEMPTS = 256
_MAX_ENCODED_SUBJECT = 4096  # longer subjects with encoded-words are not decoded


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """Receiver options.

    re_prefix -- "v0.1" (default): a Re:/Fwd: subject is not protocol; "v0.2": strip
                 one or more `Re:` (never `Fwd:`)
    max_bytes -- larger messages are refused (invalid_field) without reading the body
    """

    re_prefix: Literal["v0.1", "v0.2"] = "v0.1"
    max_bytes: int = 10 * 1024 * 1024


_DEFAULT_OPTIONS = ParseOptions()


@dataclass(slots=True)
class _Part:
    headers: dict[str, list[str]]
    body: bytes


@dataclass(slots=True)
class _Payload:
    json_parts: list[_Part] = field(default_factory=list)
    plain: list[_Part] = field(default_factory=list)
    html: list[_Part] = field(default_factory=list)


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


def _split_multipart(body: bytes, boundary: str) -> list[bytes]:
    delim = b"--" + boundary.encode("utf-8", "replace")
    parts: list[bytes] = []
    current: list[bytes] | None = None
    for line in body.splitlines(keepends=True):
        stripped = line.rstrip(b"\r\n").rstrip(b" \t")
        if stripped.startswith(delim):
            rest = stripped[len(delim) :]
            if rest == b"--":
                if current is not None:
                    parts.append(b"".join(current))
                return parts
            if rest == b"":
                if current is not None:
                    parts.append(b"".join(current))
                current = []
                if len(parts) >= _MAX_PARTS:
                    return parts
                continue
        if current is not None:
            current.append(line)
    if current is not None:  # missing close delimiter: keep what we have (lenient)
        parts.append(b"".join(current))
    return parts


def _strip_last_newline(data: bytes) -> bytes:
    # The CRLF before a boundary delimiter belongs to the delimiter (RFC 2046 5.1.1).
    if data.endswith(b"\r\n"):
        return data[:-2]
    if data.endswith(b"\n"):
        return data[:-1]
    return data


def _collect(headers: dict[str, list[str]], body: bytes, out: _Payload, depth: int) -> None:
    mtype, params = _content_type(headers)
    if mtype.startswith("multipart/"):
        boundary = params.get("boundary")
        if not boundary or depth >= _MAX_DEPTH:
            return
        for chunk in _split_multipart(body, boundary):
            sub_headers, sub_body = _split_headers(chunk)
            _collect(sub_headers, _strip_last_newline(sub_body), out, depth + 1)
        return
    if mtype.startswith("message/"):
        return  # never descend into an attached message: a forward is not a request
    part = _Part(headers, body)
    if mtype == "application/json" or (mtype.startswith("application/") and mtype.endswith("+json")):
        out.json_parts.append(part)
        return
    disposition = (_one(headers, "content-disposition") or "").split(";")[0].strip().lower()
    if disposition == "attachment":
        return  # an attached text file is not the message body
    if mtype == "text/plain":
        out.plain.append(part)
    elif mtype == "text/html":
        out.html.append(part)


def _decode_part(part: _Part) -> str:
    """Transfer-decode and charset-decode a leaf part. Raises ValueError when undecodable."""
    cte = (_one(part.headers, "content-transfer-encoding") or "7bit").lower()
    data = part.body
    if cte == "base64":
        compact = re.sub(rb"[^A-Za-z0-9+/=]", b"", data).rstrip(b"=")
        compact += b"=" * (-len(compact) % 4)
        try:
            data = binascii.a2b_base64(compact)
        except binascii.Error as exc:
            raise ValueError(f"bad base64: {exc}") from exc
    elif cte == "quoted-printable":
        data = binascii.a2b_qp(data)
    _, params = _content_type(part.headers)
    charset = params.get("charset", "utf-8").strip().lower() or "utf-8"
    if charset in ("us-ascii", "ascii"):
        charset = "utf-8"  # a superset; mislabelled 8-bit mail is common
    try:
        return data.decode(charset, "replace")
    except Exception:  # unknown charset, or a non-text codec ("hex", "rot13", ...): read as UTF-8
        return data.decode("utf-8", "replace")


def _strip_quotes_and_signature(text: str) -> str:
    kept: list[str] = []
    for line in _LINE_SPLIT.split(text):
        if line in _SIG:
            break  # everything after a `-- ` signature line is signature
        if line.lstrip().startswith(">"):
            continue  # quoted text from an earlier message
        kept.append(line)
    return "\n".join(kept)


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


def _html_to_text(text: str) -> str:
    text = _drop_hidden(text)
    text = _BREAK_TAG.sub("\n", text)
    text = _TAG.sub("", text)
    # After the tags go, the same text rules apply: `>` quotes and `-- ` signatures.
    return _strip_quotes_and_signature(html.unescape(text))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Parsers disagree on which of two equal keys wins ({"amount": "1", "amount": "1000"}):
    # an ambiguity a signer and a verifier could read differently, so it is refused.
    obj = dict(pairs)
    if len(obj) != len(pairs):
        raise ValueError("duplicate key in a JSON object")
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def _find_object(text: str) -> tuple[dict[str, Any] | None, bool]:
    """The payload object in prose: (object, attempted).

    The payload is the first JSON object (raw_decode at each `{`) that has `v` or
    `type`; objects without either, and braces that start no JSON, are prose. A `{`
    followed by a JSON string that fails to decode is an attempted payload (`attempted`).
    Two payload-shaped objects are ambiguous: raises _Stop(invalid_json)."""
    found: dict[str, Any] | None = None
    attempted = False
    start = text.find("{")
    attempts = 0
    # Failed attempts can each scan far (nested unterminated arrays): bound the total work.
    budget = 4 * len(text) + 65536
    while start >= 0 and attempts < _MAX_JSON_ATTEMPTS:
        attempts += 1
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except Exception as exc:  # JSONDecodeError, RecursionError, int-too-long ValueError
            attempted = attempted or _ATTEMPT.match(text, start) is not None
            reached = exc.pos if isinstance(exc, json.JSONDecodeError) else len(text)
            budget -= max(reached - start, 1)
            if budget < 0:
                detail = "too much text that starts JSON and does not parse"
                raise _Stop(Problem(OopsCode.INVALID_JSON, detail)) from exc
            start = text.find("{", start + 1)
            continue
        if isinstance(obj, dict) and ("v" in obj or "type" in obj):
            if found is not None:
                raise _Stop(
                    Problem(OopsCode.INVALID_JSON, "the body holds more than one Envelopay JSON object")
                )
            found = obj
        start = text.find("{", end)  # an object's inner braces belong to it
    return found, attempted or found is not None


def _extract_body(headers: dict[str, list[str]], body: bytes) -> dict[str, Any] | None:
    """Payload placement: JSON part, else text/plain, else HTML. Raises _Stop."""
    payload = _Payload()
    _collect(headers, body, payload, 0)
    if payload.json_parts:
        if len(payload.json_parts) > 1:
            raise _Stop(Problem(OopsCode.INVALID_JSON, "more than one application/json part"))
        try:
            text = _decode_part(payload.json_parts[0])
            obj = _DECODER.decode(text.removeprefix("\ufeff"))  # a byte-order mark is not content
        except Exception as exc:  # ValueError, RecursionError
            detail = f"the application/json part is not JSON: {exc}"
            raise _Stop(Problem(OopsCode.INVALID_JSON, detail)) from exc
        if not isinstance(obj, dict):
            raise _Stop(Problem(OopsCode.INVALID_JSON, "the application/json part is not a JSON object"))
        return obj
    # HTML is read only when there is no text/plain part (multipart/alternative gives both).
    parts, to_text = (
        (payload.plain, _strip_quotes_and_signature) if payload.plain else (payload.html, _html_to_text)
    )
    attempted = False
    for part in parts:
        try:
            text = to_text(_decode_part(part))
        except ValueError as exc:
            raise _Stop(Problem(OopsCode.INVALID_JSON, f"undecodable body part: {exc}")) from exc
        obj, tried = _find_object(text)
        attempted = attempted or tried
        if obj is not None:
            return obj
    if attempted:
        raise _Stop(Problem(OopsCode.INVALID_JSON, "the body starts a JSON object that does not parse"))
    return None


# ---------------------------------------------------------------- validation


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for item in loc:
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out


def _field_problems(kind: MessageType, err: ValidationError) -> list[Problem]:
    problems: list[Problem] = []
    for e in err.errors(include_url=False):
        loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and "[" in x))
        path = _loc(loc)
        last = loc[-1] if loc else None
        # An empty or null wallet is no wallet (decision, SPEC.md).
        missing = e["type"] == "missing" or (
            last == "wallet" and (e["type"] == "string_too_short" or e.get("input") is None)
        )
        if missing and last == "wallet" and kind in (MessageType.INVOICE, MessageType.METHODS):
            # Spec code: INVOICE without `wallet`, or a METHODS rail without one.
            problems.append(Problem(OopsCode.MISSING_WALLET, f"{path}: a wallet is required", path))
        elif missing:
            problems.append(Problem(OopsCode.MISSING_FIELD, f"{path}: required", path))
        else:
            problems.append(Problem(OopsCode.INVALID_FIELD, f"{path or 'body'}: {e['msg']}", path or None))
    return problems


def _validate(
    kind: MessageType, body: dict[str, Any], warnings: list[str]
) -> tuple[Message | None, list[Problem]]:
    """Envelope, version and field checks for a body already bound to `kind`."""
    for key in ("v", "type"):
        if key not in body:
            return None, [Problem(OopsCode.MISSING_FIELD, f"the JSON body needs `{key}`", key)]
    v, btype = body["v"], body["type"]
    if not isinstance(v, str) or (vm := _VERSION.fullmatch(v)) is None:
        return None, [Problem(OopsCode.INVALID_FIELD, "`v` must be a version string like 0.1.0", "v")]
    if not isinstance(btype, str):
        return None, [Problem(OopsCode.INVALID_FIELD, "`type` must be a string", "type")]
    version = (int(vm.group(1)), int(vm.group(2)))
    if version not in SUPPORTED_VERSIONS:
        return None, [
            Problem(OopsCode.UNSUPPORTED_VERSION, f"version {v} is not supported (0.1.x, 0.2.x)", "v")
        ]
    data = dict(body)
    data["type"] = kind.value  # the subject's type governs
    prepaid = ("amount", "token", "chain", "proof")
    if kind is MessageType.ORDER:
        present = [k for k in prepaid if k in data]
        if present and version < (0, 2):
            # In 0.1 these are unknown fields, which "must be ignored".
            for k in present:
                del data[k]
            warnings.append("prepaid ORDER fields ignored: they need v 0.2.x")
        elif present and len(present) < len(prepaid):
            missing = [k for k in prepaid if k not in data]
            return None, [
                Problem(
                    OopsCode.MISSING_FIELD,
                    f"a prepaid ORDER needs amount, token, chain and proof; missing {', '.join(missing)}",
                    missing[0],
                )
            ]
    # `"PAY"` for `"pay"` is a spelling slip, not another type: it gets the field codes.
    other_type = btype.strip().lower() != kind.value
    model = model_for(kind)
    try:
        message = model.model_validate(data, context={"wire": True})
    except ValidationError as err:
        problems = _field_problems(kind, err)
        if other_type:
            return None, [
                Problem(
                    OopsCode.TYPE_MISMATCH,
                    f"subject says {kind.keyword} but the body says {btype!r}"
                    f" and is not a valid {kind.keyword}",
                    "type",
                )
            ]
        problems.sort(key=lambda p: _PROBLEM_ORDER.get(p.code, 9))
        return None, problems
    if btype != kind.value:
        warnings.append(f"body type {btype!r} disagrees with the subject; the subject ({kind.keyword}) rules")
    return message, []  # type: ignore[return-value]


def _split_ids(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    ids = re.findall(r"<[^<>\s]+>", value)
    return tuple(ids) if ids else tuple(value.split())


# ---------------------------------------------------------------- entry point


def parse(raw: bytes, *, options: ParseOptions | None = None) -> Parsed:
    """Parse one raw message. Never raises: every outcome is a `Parsed` value."""
    opts = options or _DEFAULT_OPTIONS
    try:
        return _parse(raw, opts)
    except Exception as exc:  # a bug, never an input outcome: the fuzz tests assert it never happens
        return Parsed(
            protocol=False,
            type=None,
            valid=False,
            oops=None,
            problems=(Problem(OopsCode.INVALID_FIELD, f"internal parser error: {type(exc).__name__}"),),
            warnings=("parser_error",),
        )


def _field_dict(fields: tuple[Field, ...]) -> dict[str, list[str]]:
    headers: dict[str, list[str]] = {}
    for f in fields:
        headers.setdefault(f.name, []).append(f.value)
    return headers


def _parse(raw: bytes, opts: ParseOptions) -> Parsed:
    if not isinstance(raw, bytes):
        raw = bytes(raw) if isinstance(raw, bytearray | memoryview) else str(raw).encode("utf-8", "replace")
    problems: list[Problem] = []
    warnings: list[str] = []

    # Stage 1: headers, read by the one reader every component shares (protocol.headers).
    # A refused block is invalid_field; its fields read before the refusal serve only to
    # address that answer.
    read = read_headers(raw)
    if isinstance(read, HeaderRefusal):
        headers, body = _field_dict(read.partial), b""
        problems.append(
            Problem(OopsCode.INVALID_FIELD, f"header refused ({read.reason}): {read.detail}", read.field)
        )
        warnings.append(f"header_refused:{read.reason}")
    else:
        headers, body = _field_dict(read.fields), read.body
    decoded: dict[str, str | None] = {}
    for name in _USED_HEADERS:
        value = _one(headers, name)
        if value is not None and name == "subject":
            # The stdlib decoder is slow on thousands of encoded-words: long ones stay raw.
            if len(value) <= _MAX_ENCODED_SUBJECT:
                value, ok = decode_subject(value)
            else:
                ok = "=?" not in value
            if not ok:
                warnings.append("undecodable RFC 2047 subject")
            value = value.strip()
        if value is not None and ("\r" in value or "\n" in value or "\x00" in value):
            problems.append(Problem(OopsCode.INVALID_FIELD, f"CR, LF or NUL in the {name} header", name))
            value = re.sub(r"[\r\n\x00]+", " ", value)
        decoded[name] = value

    from_list = _addresses(decoded["from"]) if len(headers.get("from", ())) <= 1 else []
    if decoded["from"] is not None and len(from_list) != 1:
        problems.append(Problem(OopsCode.INVALID_FIELD, "From must name exactly one address", "from"))
    subject = decoded["subject"]
    form = classify_subject(subject, re_prefix=opts.re_prefix)
    xtype = decoded["x-envelopay-type"]
    common: dict[str, Any] = {
        "subject": subject,
        "note": form.note,
        "message_id": decoded["message-id"],
        "in_reply_to": (_split_ids(decoded["in-reply-to"]) or (None,))[0],
        "references": _split_ids(decoded["references"]),
        "from_addr": from_list[0] if len(from_list) == 1 else None,
        "to_addrs": tuple(_addresses(decoded["to"])),
        "x_envelopay_type": xtype,
    }

    # Stage 2: subject.
    if not form.protocol:
        return Parsed(
            protocol=False, type=None, valid=False, oops=None, problems=tuple(problems),
            warnings=tuple(warnings), **common,
        )
    kind = form.type
    is_oops = kind is MessageType.OOPS

    def done(
        problem: Problem | None, body_obj: dict[str, Any] | None = None, extra: list[Problem] | None = None
    ) -> Parsed:
        allp = [*problems, *([problem] if problem else []), *(extra or [])]
        # Never answer an OOPS with an OOPS.
        return Parsed(
            protocol=True,
            type=kind,
            valid=False,
            oops=None if is_oops else allp[0].code,
            body=body_obj,
            problems=tuple(allp),
            warnings=tuple(warnings),
            **common,
        )

    if problems:
        return done(None)
    if kind is None:
        return Parsed(
            protocol=True,
            type=None,
            valid=False,
            oops=OopsCode.UNKNOWN_TYPE,
            problems=(
                Problem(
                    OopsCode.UNKNOWN_TYPE,
                    f"unknown type {(form.keyword or '')[:64]}; supported types: {SUPPORTED_TYPES_TEXT}",
                    "subject",
                ),
            ),
            warnings=tuple(warnings),
            **common,
        )
    if xtype is not None and xtype.strip().lower() != kind.value:
        warnings.append(f"X-Envelopay-Type {xtype!r} disagrees with the subject; the subject governs")
    if len(raw) > opts.max_bytes:
        return done(Problem(OopsCode.INVALID_FIELD, f"message larger than {opts.max_bytes} bytes"))

    # Stage 3: payload.
    try:
        body_obj = _extract_body(headers, body)
    except _Stop as stop:
        return done(stop.problem)
    if body_obj is None:
        if kind is MessageType.WHICH:
            # Spec: "A bare WHICH with no body is valid."
            return Parsed(
                protocol=True,
                type=kind,
                valid=True,
                oops=None,
                message=Which(),
                warnings=tuple(warnings),
                **common,
            )
        return done(Problem(OopsCode.MISSING_FIELD, f"{kind.keyword} needs a JSON body"))

    # Stages 4-7.
    message, field_problems = _validate(kind, body_obj, warnings)
    if message is None:
        return done(None, body_obj, field_problems)
    return Parsed(
        protocol=True,
        type=kind,
        valid=True,
        oops=None,
        message=message,
        body=body_obj,
        warnings=tuple(warnings),
        **common,
    )
