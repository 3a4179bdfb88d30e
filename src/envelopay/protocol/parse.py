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

import re
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

from pydantic import ValidationError

from envelopay.protocol.autosubmit import no_answer_reason
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import (
    SUPPORTED_TYPES_TEXT,
    SubjectForm,
    classify_subject,
    decode_subject,
    is_plain_reply,
    is_reply,
)
from envelopay.protocol.headers import SINGLETON_HEADERS, Field, HeaderRefusal, read_headers
from envelopay.protocol.headers import addresses as _addresses
from envelopay.protocol.lenient import LENIENT_PREFIX, fill, type_line
from envelopay.protocol.messages import (
    SPEC_TYPES,
    SUPPORTED_VERSIONS,
    Message,
    MessageType,
    Methods,
    Which,
    model_for,
)
from envelopay.protocol.mime import (
    decode_text,
    decode_transfer,
    head_block,
    split_multipart,
    strip_last_newline,
)
from envelopay.protocol.parsed import Parsed, Problem
from envelopay.protocol.payload import PayloadError, TextLeaf, extract, leading_text
from envelopay.protocol.quoting import own_text

__all__ = ["REPLY_HINT", "SINGLETON_HEADERS", "ParseOptions", "parse", "parser_options"]

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

_MAX_DEPTH = 8
_BY_VALUE: dict[str, MessageType] = {t.value: t for t in SPEC_TYPES}
_JSON_TYPES = ", ".join(t.value for t in SPEC_TYPES)
_MAX_PARTS = 256
_MAX_ENCODED_SUBJECT = 4096  # longer subjects with encoded-words are not decoded


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """Receiver options.

    re_prefix -- "v0.1" (default): a Re:/Fwd: subject is not protocol; "v0.2": strip
                 one or more `Re:` (never `Fwd:`)
    max_bytes -- larger messages are refused (invalid_field) without reading the body
    profile   -- "strict" (default) or "lenient", the interop profile (`protocol.lenient`)
    in_our_thread -- the receiver knows this mail answers one of its own messages (its
                 In-Reply-To/References name a Message-ID it sent): a `Re:` subject
                 is then a person's reply, and the body's JSON `type` names the
                 message (SPEC.md "Replies in our thread"); set by the engine only
    extensions -- the extensions this receiver speaks (`"status"`: WAIT and WHATSUP are
                 types, SPEC.md "Status while working"); none by default, so their
                 keywords are unknown_type as the spec says
    """

    re_prefix: Literal["v0.1", "v0.2"] = "v0.1"
    max_bytes: int = 10 * 1024 * 1024
    profile: Literal["strict", "lenient"] = "strict"
    in_our_thread: bool = False
    extensions: frozenset[str] = frozenset()


_DEFAULT_OPTIONS = ParseOptions()


def parser_options(parser: object) -> ParseOptions:
    """The options a receiver's parser runs with: those of `partial(parse, options=...)`,
    the defaults for plain `parse` or any other function."""
    given = getattr(parser, "keywords", {}).get("options") if getattr(parser, "func", None) is parse else None
    return given if isinstance(given, ParseOptions) else _DEFAULT_OPTIONS


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
                inner = _Payload()  # a deferred container: walk it now, for its text
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
    kind: MessageType, body: dict[str, Any], warnings: list[str], lenient: bool = False
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
        message = model.model_validate(data, context={"wire": True, "lenient": lenient})
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
    if isinstance(message, Methods) and any(r.price is None for r in message.rails):
        warnings.append(f"{LENIENT_PREFIX} METHODS rail without price: price on request")  # L3
    return message, []  # type: ignore[return-value]


# What a person replying in our thread is told when the body cannot be read (the OOPS
# note): how to write it, in words a mail client's user can follow.
REPLY_HINT = (
    "to answer in this thread, write the JSON object alone at the top of your reply, above"
    ' the quoted mail, e.g. {"v": "0.1.0", "type": "pay", "id": "...", ...}: straight double'
    " quotes, no trailing commas, and the type of the message you send"
)


def _reply_form(
    headers: dict[str, list[str]], body: bytes, form: SubjectForm
) -> tuple[SubjectForm, Problem | None]:
    """A `Re:` reply to one of our messages: the body's JSON `type` is the message's
    type (the subject is ours, quoted back by the person's client). No JSON object in
    the body: the mail stays prose (`form`). A body we cannot read is answered with
    the code and `REPLY_HINT`."""
    try:
        obj = _extract_body(headers, body)
    except _Stop as stop:
        return SubjectForm(True), replace(stop.problem, detail=f"{stop.problem.detail}; {REPLY_HINT}")
    if obj is None:
        _, plain, html_parts = _parts(headers, body, text=True)
        if "{" in own_text(leading_text(plain, html_parts)):
            # A brace but no object with "v" or "type": JSON as a person types it
            # ({'type': 'pay'}, curly quotes), not prose.
            return SubjectForm(True), Problem(
                OopsCode.INVALID_JSON, f"no JSON object with \"v\" and \"type\" in your text; {REPLY_HINT}"
            )
        return form, None
    btype = obj.get("type")
    if not isinstance(btype, str) or not btype.strip():
        return SubjectForm(True), Problem(
            OopsCode.MISSING_FIELD, f"the JSON body needs `type`; {REPLY_HINT}", "type"
        )
    kind = _BY_VALUE.get(btype.strip().lower())
    if kind is None:
        return SubjectForm(True, keyword=btype.strip().upper()[:64]), Problem(
            OopsCode.UNKNOWN_TYPE,
            f"unknown type {btype[:64]!r}: the JSON `type` is one of {_JSON_TYPES}; {REPLY_HINT}",
            "type",
        )
    return SubjectForm(True, keyword=kind.keyword, type=kind), None


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


def _from_problem(fields: int, mailboxes: int) -> str | None:
    """Why no one sender can be read from the From field(s), or None when one can."""
    if fields == 0:
        return "no From field"
    if fields > 1:
        return f"{fields} From fields"
    if mailboxes == 0:
        return "From names no address that can be read"
    if mailboxes > 1:
        return f"From names {mailboxes} mailboxes"
    return None


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
    form = classify_subject(subject, re_prefix=opts.re_prefix, extensions=opts.extensions)
    lenient = opts.profile == "lenient"
    if lenient and is_reply(subject) and len(raw) <= opts.max_bytes:
        _, plain, html_parts = _parts(headers, body, text=True)
        line = type_line(leading_text(plain, html_parts))
        if line is not None:  # L1 (protocol.lenient)
            form = line
            warnings.append(f"{LENIENT_PREFIX} Re: subject read as {line.keyword} from the body's first line")
    xtype = decoded["x-envelopay-type"]
    reply_stop: Problem | None = None
    if opts.in_our_thread and not form.protocol and is_plain_reply(subject) and len(raw) <= opts.max_bytes:
        form, reply_stop = _reply_form(headers, body, form)
        if form.protocol:
            read_as = form.keyword or "a body"
            warnings.append(f"reply in our thread: Re: subject read as {read_as} from the JSON")
    common: dict[str, Any] = {
        "subject": subject,
        "note": form.note,
        "message_id": decoded["message-id"],
        "in_reply_to": (_split_ids(decoded["in-reply-to"]) or (None,))[0],
        "references": _split_ids(decoded["references"]),
        "from_addr": from_list[0] if len(from_list) == 1 else None,
        "to_addrs": tuple(_addresses(decoded["to"])),
        "x_envelopay_type": xtype,
        "from_problem": _from_problem(len(headers.get("from", ())), len(from_list)),
        "no_answer": no_answer_reason(headers, from_list[0] if len(from_list) == 1 else None),
    }

    # Stage 2: subject.
    if not form.protocol:
        return Parsed(
            protocol=False, type=None, valid=False, oops=None, problems=tuple(problems),
            warnings=tuple(warnings), **common,
        )
    kind = form.type
    is_oops = kind is MessageType.OOPS
    if reply_stop is not None:  # a reply in our thread whose body we cannot read
        return Parsed(protocol=True, type=kind, valid=False, oops=reply_stop.code, problems=(reply_stop,),
                      warnings=tuple(warnings), **common)

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
    checked = fill(kind, body_obj, decoded["message-id"], warnings) if lenient else body_obj
    message, field_problems = _validate(kind, checked, warnings, lenient)
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
