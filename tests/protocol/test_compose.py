"""compose(): the bytes it writes, read back by the stdlib's strict parser and by parse()."""

from __future__ import annotations

import email
import json
from datetime import UTC, datetime, timedelta, timezone
from email import policy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envelopay.protocol import (
    HeaderValueError,
    Invoice,
    Outbound,
    Pay,
    Which,
    compose,
    compose_message,
    message_json,
    new_message_id,
    parse,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PAY = Pay(id="pay_1", amount=30_000_000, token="USDC", chain="base", proof={"tx": "0xabc"}, note="Dinner")


def out(message: object = PAY, **kw: object) -> Outbound:
    base: dict[str, object] = {
        "sender": "a@x.test", "recipient": "b@y.test", "message": message, "message_id": "<1@x.test>",
        "date": NOW,
    }  # fmt: skip
    base.update(kw)
    return Outbound(**base)  # type: ignore[arg-type]


def test_layout_read_by_the_strict_stdlib_parser() -> None:
    raw = compose(out(in_reply_to="<0@y.test>", references=("<z@y.test>", "<0@y.test>")))
    assert b"\r\n" in raw and b"\n" not in raw.replace(b"\r\n", b"")  # CRLF only
    msg = email.message_from_bytes(raw, policy=policy.default)
    assert not msg.defects
    assert msg["Subject"] == "PAY | Dinner"
    assert msg["From"] == "a@x.test" and msg["To"] == "b@y.test"
    assert msg["Message-ID"] == "<1@x.test>" and msg["In-Reply-To"] == "<0@y.test>"
    assert msg["References"].split() == ["<z@y.test>", "<0@y.test>"]
    assert msg["X-Envelopay-Type"] == "PAY"
    assert email.utils.parsedate_to_datetime(msg["Date"]) == NOW
    parts = list(msg.iter_parts())
    assert [p.get_content_type() for p in parts] == ["multipart/alternative", "application/json"]
    plain, page = list(parts[0].iter_parts())
    assert (plain.get_content_type(), page.get_content_type()) == ("text/plain", "text/html")
    wire = json.loads(parts[1].get_content())
    assert wire == {"v": "0.1.0", "type": "pay", "id": "pay_1", "amount": "30000000", "token": "USDC",
                    "chain": "base", "proof": {"tx": "0xabc"}, "note": "Dinner"}  # fmt: skip
    assert list(wire)[:2] == ["v", "type"]
    assert parts[1]["Content-Transfer-Encoding"] == "base64"
    # The text part is the JSON alone (issue 12: the simplest receiver), indented (issue 30:
    # a person in a terminal client reads one field a line).
    shown = {"v": wire["v"], "type": wire["type"], "note": wire["note"], **wire}  # the note read third
    assert plain.get_content().replace("\r\n", "\n").rstrip("\n") == json.dumps(shown, indent=2)
    assert json.loads(plain.get_content()) == wire
    assert "Dinner" in page.get_content() and '"amount": "30000000"' in page.get_content()


def test_text_part_serves_receivers_that_read_the_whole_body_or_the_first_brace_line() -> None:
    long_note = "ü" + "x" * 2000  # non-ASCII and longer than a line: quoted-printable
    for message in (PAY, Which(), Which(note=long_note)):
        msg = email.message_from_bytes(compose(out(message)), policy=policy.default)
        plain = next(p for p in msg.walk() if p.get_content_type() == "text/plain")
        text = plain.get_content()
        assert json.loads(text.strip()) == json.loads(message_json(message))
        # No line is a JSON object on its own: a reader trying `{` lines first falls back
        # to the whole text (tests/interop/test_kimjune01_text.py runs their extractors).
        for line in text.split("\n"):
            if line.strip().startswith("{"):
                with pytest.raises(ValueError):
                    json.loads(line)
    raw = compose(out(PAY))
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998


def test_non_ascii_subject_is_rfc2047_and_round_trips() -> None:
    raw = compose(out(Which(note="Ünïcödé — 日本語 " * 3)))
    assert raw.isascii()
    p = parse(raw)
    assert p.valid and p.note == ("Ünïcödé — 日本語 " * 3).strip()


def test_subject_note_override_and_derived_note_folding() -> None:
    assert parse(compose(out(note="custom"))).note == "custom"
    multi = Which(note="line one\r\nline two\x00\tend")
    p = parse(compose(out(multi)))
    assert p.valid and p.note == "line one line two end"
    assert p.message == multi  # the JSON keeps the whole note
    long = parse(compose(out(Which(note="x" * 500))))
    assert long.note is not None and len(long.note) == 200 and long.note.endswith("…")


def test_encoded_word_lookalike_in_note_is_not_decoded_by_the_receiver() -> None:
    sneaky = "=?utf-8?q?x=0D=0ABcc:_v@e.test?="
    p = parse(compose(out(note=sneaky)))
    assert p.valid and p.note == sneaky


def test_non_utc_date_is_kept() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5)))
    msg = email.message_from_bytes(compose(out(date=when)), policy=policy.default)
    assert email.utils.parsedate_to_datetime(msg["Date"]) == when


@pytest.mark.parametrize(
    "kw",
    [
        {"sender": "Alice <a@x.test>"},
        {"sender": "a@x.test, c@z.test"},
        {"recipient": "not an address"},
        {"message_id": "1@x.test"},
        {"message_id": "<no-at-sign>"},
        {"in_reply_to": "<a b@x>"},
        {"note": "x\x00y"},
        {"date": datetime(2026, 1, 1)},
        {"note": "x" * 1000},
    ],
)
def test_bad_headers_are_refused(kw: dict[str, object]) -> None:
    with pytest.raises(HeaderValueError):
        compose(out(**kw))


def test_refusal_happens_before_anything_is_produced() -> None:
    # compose is pure: a refusal returns nothing at all, and the same Outbound still fails.
    bad = out(recipient="b@y.test\r\nBcc: v@e.test")
    for _ in range(2):
        with pytest.raises(HeaderValueError, match="recipient"):
            compose(bad)


def test_new_message_id_uses_the_given_domain_only() -> None:
    mid = new_message_id("garden.test")
    assert mid.startswith("<") and mid.endswith("@garden.test>")
    assert new_message_id("garden.test") != mid
    with pytest.raises(HeaderValueError):
        new_message_id("bad domain")
    with pytest.raises(HeaderValueError):
        new_message_id("x.test\r\n")


def test_compose_message_keeps_a_given_id() -> None:
    inv = Invoice(id="i", amount=1, token="SOL", chain="solana", wallet="w")
    raw, mid = compose_message(inv, sender="a@x.test", recipient="b@y.test", domain="x.test", now=NOW,
                               message_id="<fixed@x.test>")  # fmt: skip
    assert mid == "<fixed@x.test>" and parse(raw).message_id == mid and parse(raw).message == inv


def test_reply_headers_chain_and_trim() -> None:
    from envelopay.protocol import reply_headers

    first = parse(compose(out(message_id="<m0@x.test>")))
    assert reply_headers(first) == ("<m0@x.test>", ("<m0@x.test>",))
    # A parent with In-Reply-To but no References: the chain starts from In-Reply-To.
    second = parse(compose(out(message_id="<m1@x.test>", in_reply_to="<m0@x.test>")))
    assert reply_headers(second) == ("<m1@x.test>", ("<m0@x.test>", "<m1@x.test>"))
    refs = tuple(f"<r{i}@x.test>" for i in range(30))
    long = parse(compose(out(message_id="<m2@x.test>", in_reply_to=refs[-1], references=refs)))
    irt, chain = reply_headers(long)
    assert irt == "<m2@x.test>" and len(chain) == 20
    assert chain[0] == "<r0@x.test>" and chain[-2:] == ("<r29@x.test>", "<m2@x.test>")
    # No usable Message-ID: nothing to thread on.
    assert reply_headers(parse(b"Subject: WHICH\r\nMessage-ID: junk\r\n\r\n")) == (None, ())


_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text()
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@given(_JSON, st.integers(min_value=0, max_value=4))
def test_the_indented_json_of_the_html_part_is_the_stdlib_text(value: object, indent: int) -> None:
    from envelopay.protocol.compose import _indented_json

    expected = json.dumps(value, ensure_ascii=False, indent=indent, separators=(",", ": "))
    assert _indented_json(value, indent) == expected


def test_indented_json_takes_the_stdlib_way_for_keys_it_would_convert() -> None:
    from envelopay.protocol.compose import _indented_json

    for value in ({1: "a", "b": [True, None]}, {"x": {None: 1.5, False: []}}, [{}, [], {"k": ()}]):
        expected = json.dumps(value, ensure_ascii=False, indent=2, separators=(",", ": "))
        assert _indented_json(value) == expected
