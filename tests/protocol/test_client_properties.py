"""Properties of the rules for mail as clients write it (SPEC.md "Payload placement"
T0-T7, "Interop profile `lenient`"): any bytes give a Parsed value under every
option; flowed text round-trips; quoted or forwarded content never becomes the
request, in shapes and languages never written in the corpus."""

# ruff: noqa: E501 -- tables of client phrases read best one language per row

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.protocol.strategies import any_message

from envelopay.protocol import Message, compose, parse
from envelopay.protocol.compose import message_json
from envelopay.protocol.flowed import flow, unflow
from envelopay.protocol.parse import ParseOptions
from envelopay.protocol.quoting import own_text

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPTIONS = [
    ParseOptions(),
    ParseOptions(profile="lenient"),
    ParseOptions(re_prefix="v0.2", profile="lenient"),
]


def _headers(subject: str, ctype: str) -> bytes:
    return (
        f"From: a@x.test\r\nTo: b@y.test\r\nSubject: {subject}\r\nMessage-ID: <p@x.test>\r\n"
        f"Content-Type: {ctype}\r\n\r\n"
    ).encode()


_FRAGMENTS = st.sampled_from(
    [
        "> ", ">>", "-- ", "\u00a0", "\u3000", "\ufeff", '{"v": "0.1.0", "type": "pay"', "}", "{", '"',
        "-----Original Message-----", "From: x", "Sent: y", "Subject: PAY", "Von: a", "Betreff: b",
        "On Mon, 1 Jan 2026, A wrote:", "Le 1 janv. 2026, A a écrit :", "____________", "mailing list",
        "Begin forwarded message:", "---------- Forwarded message ---------", "PAY | x", "WHICH", "\r\n",
        "\n", " ", "=\r\n", "<br>", "<blockquote>", "&nbsp;",
    ]
)  # fmt: skip
_TEXT = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=8)), max_size=60).map("".join)
_CTYPES = st.sampled_from(
    [
        "text/plain; format=flowed",
        "text/plain; format=flowed; delsp=yes",
        "text/plain; charset=utf-8",
        "text/html; charset=utf-8",
        "text/plain; format=flowed; delsp=yes; charset=iso-8859-1",
    ]
)
_SUBJECTS = st.sampled_from(
    ["PAY | x", "Re: PAY | x", "Re: WHICH", "[list] ORDER", "FULFILL", "INVOICE (fwd)"]
)


def _invariants(raw: bytes, options: ParseOptions) -> None:
    p = parse(raw, options=options)
    assert "parser_error" not in p.warnings
    if p.valid:
        assert p.protocol and p.oops is None and p.message is not None
    if options.profile == "strict":
        assert not any(w.startswith("lenient:") for w in p.warnings)


@SETTINGS
@given(_SUBJECTS, _CTYPES, _TEXT)
def test_client_shaped_text_always_gives_a_parsed_value(subject: str, ctype: str, text: str) -> None:
    raw = _headers(subject, ctype) + text.encode("utf-8", "surrogatepass")
    for options in OPTIONS:
        _invariants(raw, options)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=1500))
def test_any_bytes_under_the_lenient_profile(raw: bytes) -> None:
    for options in OPTIONS:
        _invariants(raw, options)
        _invariants(_headers("Re: PAY", "text/plain; format=flowed; delsp=yes") + raw, options)


_LINE = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    ),
    max_size=200,
).map(lambda s: s.rstrip(" "))


@SETTINGS
@given(st.lists(_LINE, min_size=1, max_size=12), st.integers(min_value=3, max_value=80), st.booleans())
def test_flowed_round_trip(lines: list[str], width: int, delsp: bool) -> None:
    text = "\n".join(lines)
    encoded = flow(text, width=width, delsp=delsp)
    assert unflow(encoded, delsp=delsp) == text
    # Soft breaks really happened where lines were long and breakable.
    if not delsp and any(len(ln) > width + 1 and " " in ln[1:width] for ln in lines):
        assert encoded.count("\r\n") > text.count("\n")


@SETTINGS
@given(any_message, st.integers(min_value=20, max_value=78), st.booleans())
def test_a_flowed_json_body_parses_to_the_message(message: Message, width: int, delsp: bool) -> None:
    body = flow(message_json(message), width=width, delsp=delsp)
    params = "format=flowed; delsp=yes" if delsp else "format=flowed"
    raw = _headers(f"{message.type.upper()} | x", f"text/plain; charset=utf-8; {params}") + body.encode()
    p = parse(raw)
    assert p.valid and p.message == message


# Quote and forward headers built from parts: languages, dates, names and forms the
# corpus never lists (rules T2-T4 must generalise, not match samples).
_NAMES = st.sampled_from(["Bob", "Zoë Ñúñez", "李雷", "O'Brien, Pat", "Ana-María López"])
_ADDRS = st.sampled_from(["<bob@worker.test>", "(bob@w.test)", "", "<z@x.example>"])
_DATES = st.sampled_from(
    [
        "Tue, 3 Mar 2026 09:15",
        "03.03.2026 09:15",
        "3/3/26 9:15 AM",
        "martes, 3 de marzo de 2026 9:15",
        "2026-03-03",
    ]
)
_VERBS = st.sampled_from(
    [
        "wrote:",
        "schrieb:",
        "a écrit :",
        "escribió:",
        "ha scritto:",
        "escreveu:",
        "schreef:",
        "skrev:",
        "napisał:",
    ]
)
_INTROS = st.sampled_from(["On", "Am", "Le", "El", "Il giorno", "Em", "Op", "Den", "W dniu", ""])
_DASHED = st.sampled_from(
    [
        "Original Message", "Forwarded message", "Ursprüngliche Nachricht", "Message d'origine", "Mensaje original",
        "Messaggio originale", "Mensagem original", "Oorspronkelijk bericht", "Vidarebefordrat meddelande",
        "Weitergeleitete Nachricht", "Message transféré", "Mensaje reenviado", "Messaggio inoltrato",
    ]
)  # fmt: skip
_HEADER_SETS = st.sampled_from(
    [
        ("From", "Sent", "To", "Subject"), ("Von", "Gesendet", "An", "Betreff"), ("De", "Envoyé", "À", "Objet"),
        ("De", "Enviado el", "Para", "Asunto"), ("Da", "Inviato", "A", "Oggetto"), ("Van", "Verzonden", "Aan", "Onderwerp"),
        ("Från", "Skickat", "Till", "Ämne"), ("Od", "Wysłano", "Do", "Temat"), ("De", "Enviada em", "Para", "Assunto"),
    ]
)  # fmt: skip


@st.composite
def quote_heads(draw: st.DrawFn) -> tuple[list[str], bool]:
    """(lines before the old message, whether the old message is `>`-quoted)."""
    form = draw(st.sampled_from(["attribution", "dashes", "block", "both"]))
    name, addr, date = draw(_NAMES), draw(_ADDRS), draw(_DATES)
    if form == "attribution":
        line = f"{draw(_INTROS)} {date}, {name} {addr} {draw(_VERBS)}".strip().replace("  ", " ")
        return [line], draw(st.booleans())
    dash = "-" * draw(st.integers(min_value=2, max_value=12))
    title = f"{dash}{draw(st.sampled_from(['', ' ']))}{draw(_DASHED)}{draw(st.sampled_from(['', ' ']))}{dash}"
    names = draw(_HEADER_SETS)
    star = draw(st.sampled_from(["", "*"]))
    colon = draw(st.sampled_from([":", " :", "\u00a0:"]))
    # Every client's header block names the sender (or the subject) and one more field.
    first = draw(st.sampled_from([names[0], names[3]]))
    others = draw(st.lists(st.sampled_from([n for n in names if n != first]), min_size=1, max_size=3, unique=True))
    order = draw(st.permutations([first, *others]))
    block = [f"{star}{n}{colon}{star} {name} {addr} {date}" for n in order]
    if form == "dashes":
        return [title], False
    if form == "block":
        return block, False
    return [title, *block], False


@SETTINGS
@given(
    quote_heads(),
    any_message,
    any_message,
    st.sampled_from(["", "Thanks!\n", "See below.\n\n"]),
    st.booleans(),
)
def test_quoted_content_never_becomes_the_request(
    head: tuple[list[str], bool], old: Message, new: Message, prose: str, pretty: bool
) -> None:
    lines, marked = head
    old_text = message_json(old, indent=2 if pretty else None)
    quoted = "\n".join(("> " + ln if marked else ln) for ln in old_text.split("\n"))
    tail = "\n".join(lines) + "\n" + quoted + "\n"
    kind = new.type.upper()
    only = _headers(f"{kind} | x", "text/plain; charset=utf-8") + (prose + tail).encode()
    p = parse(only)
    assert p.body is None or p.body != json.loads(old_text), lines  # never the old request
    with_new = (
        _headers(f"{kind} | x", "text/plain; charset=utf-8")
        + (message_json(new, indent=2) + "\n\n" + tail).encode()
    )
    q = parse(with_new)
    assert q.body == json.loads(message_json(new)), lines
    assert own_text(prose + tail).count("{") == prose.count("{")


@SETTINGS
@given(any_message)
def test_compose_output_is_unchanged_by_the_client_rules(message: Message) -> None:
    from datetime import UTC, datetime

    from envelopay.protocol import Outbound

    raw = compose(Outbound("a@x.test", "b@y.test", message, "<c@x.test>", datetime(2026, 1, 1, tzinfo=UTC)))
    for options in OPTIONS:
        p = parse(raw, options=options)
        assert p.valid and p.message == message and not any(w.startswith("lenient:") for w in p.warnings)
