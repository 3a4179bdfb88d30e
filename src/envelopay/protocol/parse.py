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
The MIME walk of stage 3 is `body_parts`, stages 4 to 7 are `validation`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from envelopay.protocol.autosubmit import no_answer_reason
from envelopay.protocol.body_parts import _extract_body, _one, _parts, _Stop
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
    MessageType,
    Which,
)
from envelopay.protocol.parsed import Parsed, Problem
from envelopay.protocol.payload import leading_text
from envelopay.protocol.quoting import own_text
from envelopay.protocol.validation import _validate

__all__ = ["REPLY_HINT", "SINGLETON_HEADERS", "ParseOptions", "parse", "parser_options"]

# SINGLETON_HEADERS (protocol.headers) is re-exported: the one list every reader refuses twice.
# Headers whose decoded value we read; CR/LF in any of them is refused.
_USED_HEADERS = ("subject", "from", "to", "message-id", "in-reply-to", "references", "x-envelopay-type")

_BY_VALUE: dict[str, MessageType] = {t.value: t for t in SPEC_TYPES}
_JSON_TYPES = ", ".join(t.value for t in SPEC_TYPES)
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


@dataclass(slots=True)
class _Read:
    """One message as stage 1 read it, and what the later stages add to."""

    raw: bytes
    opts: ParseOptions
    headers: dict[str, list[str]]
    body: bytes
    decoded: dict[str, str | None]
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _parse(raw: bytes, opts: ParseOptions) -> Parsed:
    if not isinstance(raw, bytes):
        raw = bytes(raw) if isinstance(raw, bytearray | memoryview) else str(raw).encode("utf-8", "replace")
    r = _read(raw, opts)
    from_list = _addresses(r.decoded["from"]) if len(r.headers.get("from", ())) <= 1 else []
    if r.decoded["from"] is not None and len(from_list) != 1:
        r.problems.append(Problem(OopsCode.INVALID_FIELD, "From must name exactly one address", "from"))
    form, reply_stop = _subject_form(r)
    common: dict[str, Any] = {
        "subject": r.decoded["subject"],
        "note": form.note,
        "message_id": r.decoded["message-id"],
        "in_reply_to": (_split_ids(r.decoded["in-reply-to"]) or (None,))[0],
        "references": _split_ids(r.decoded["references"]),
        "from_addr": from_list[0] if len(from_list) == 1 else None,
        "to_addrs": tuple(_addresses(r.decoded["to"])),
        "x_envelopay_type": r.decoded["x-envelopay-type"],
        "from_problem": _from_problem(len(r.headers.get("from", ())), len(from_list)),
        "no_answer": no_answer_reason(r.headers, from_list[0] if len(from_list) == 1 else None),
    }

    # Stage 2: subject.
    if not form.protocol:
        return Parsed(
            protocol=False, type=None, valid=False, oops=None, problems=tuple(r.problems),
            warnings=tuple(r.warnings), **common,
        )
    if reply_stop is not None:  # a reply in our thread whose body we cannot read
        return Parsed(protocol=True, type=form.type, valid=False, oops=reply_stop.code,
                      problems=(reply_stop,), warnings=tuple(r.warnings), **common)
    return _protocol(r, form, common)


def _read(raw: bytes, opts: ParseOptions) -> _Read:
    """Stage 1: headers, read by the one reader every component shares (protocol.headers).
    A refused block is invalid_field; its fields read before the refusal serve only to
    address that answer. Then the headers the protocol uses, decoded."""
    read = read_headers(raw)
    if isinstance(read, HeaderRefusal):
        r = _Read(raw, opts, _field_dict(read.partial), b"", {})
        r.problems.append(
            Problem(OopsCode.INVALID_FIELD, f"header refused ({read.reason}): {read.detail}", read.field)
        )
        r.warnings.append(f"header_refused:{read.reason}")
    else:
        r = _Read(raw, opts, _field_dict(read.fields), read.body, {})
    for name in _USED_HEADERS:
        value = _one(r.headers, name)
        if value is not None and name == "subject":
            # The stdlib decoder is slow on thousands of encoded-words: long ones stay raw.
            if len(value) <= _MAX_ENCODED_SUBJECT:
                value, ok = decode_subject(value)
            else:
                ok = "=?" not in value
            if not ok:
                r.warnings.append("undecodable RFC 2047 subject")
            value = value.strip()
        if value is not None and ("\r" in value or "\n" in value or "\x00" in value):
            r.problems.append(Problem(OopsCode.INVALID_FIELD, f"CR, LF or NUL in the {name} header", name))
            value = re.sub(r"[\r\n\x00]+", " ", value)
        r.decoded[name] = value
    return r


def _subject_form(r: _Read) -> tuple[SubjectForm, Problem | None]:
    """The subject's grammar; under the lenient profile a Re: subject's type from the
    body's first line (L1); in our thread a person's Re: reply typed by its JSON (and the
    problem of a body that cannot be read)."""
    subject, opts = r.decoded["subject"], r.opts
    form = classify_subject(subject, re_prefix=opts.re_prefix, extensions=opts.extensions)
    if opts.profile == "lenient" and is_reply(subject) and len(r.raw) <= opts.max_bytes:
        _, plain, html_parts = _parts(r.headers, r.body, text=True)
        line = type_line(leading_text(plain, html_parts))
        if line is not None:  # L1 (protocol.lenient)
            form = line
            r.warnings.append(
                f"{LENIENT_PREFIX} Re: subject read as {line.keyword} from the body's first line"
            )
    reply_stop: Problem | None = None
    if opts.in_our_thread and not form.protocol and is_plain_reply(subject) and len(r.raw) <= opts.max_bytes:
        form, reply_stop = _reply_form(r.headers, r.body, form)
        if form.protocol:
            read_as = form.keyword or "a body"
            r.warnings.append(f"reply in our thread: Re: subject read as {read_as} from the JSON")
    return form, reply_stop


def _protocol(r: _Read, form: SubjectForm, common: dict[str, Any]) -> Parsed:
    """A protocol message: stages 2 (its type) to 7, each stopping it with one problem."""
    kind = form.type
    is_oops = kind is MessageType.OOPS

    def done(
        problem: Problem | None, body_obj: dict[str, Any] | None = None, extra: list[Problem] | None = None
    ) -> Parsed:
        allp = [*r.problems, *([problem] if problem else []), *(extra or [])]
        # Never answer an OOPS with an OOPS.
        return Parsed(
            protocol=True,
            type=kind,
            valid=False,
            oops=None if is_oops else allp[0].code,
            body=body_obj,
            problems=tuple(allp),
            warnings=tuple(r.warnings),
            **common,
        )

    if r.problems:
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
            warnings=tuple(r.warnings),
            **common,
        )
    xtype = r.decoded["x-envelopay-type"]
    if xtype is not None and xtype.strip().lower() != kind.value:
        r.warnings.append(f"X-Envelopay-Type {xtype!r} disagrees with the subject; the subject governs")
    if len(r.raw) > r.opts.max_bytes:
        return done(Problem(OopsCode.INVALID_FIELD, f"message larger than {r.opts.max_bytes} bytes"))

    # Stage 3: payload.
    try:
        body_obj = _extract_body(r.headers, r.body)
    except _Stop as stop:
        return done(stop.problem)
    if body_obj is None:
        if kind is MessageType.WHICH:
            # Spec: "A bare WHICH with no body is valid."
            return Parsed(protocol=True, type=kind, valid=True, oops=None, message=Which(),
                          warnings=tuple(r.warnings), **common)
        return done(Problem(OopsCode.MISSING_FIELD, f"{kind.keyword} needs a JSON body"))

    # Stages 4-7.
    lenient = r.opts.profile == "lenient"
    checked = fill(kind, body_obj, r.decoded["message-id"], r.warnings) if lenient else body_obj
    message, field_problems = _validate(kind, checked, r.warnings, lenient)
    if message is None:
        return done(None, body_obj, field_problems)
    return Parsed(protocol=True, type=kind, valid=True, oops=None, message=message, body=body_obj,
                  warnings=tuple(r.warnings), **common)
