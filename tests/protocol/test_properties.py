"""Properties: parse(compose(m)).message == m for all nine types; any bytes give a value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.protocol.strategies import BY_TYPE, any_message

from envelopay.protocol import Message, MessageType, Outbound, compose, parse

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _round_trip(message: Message, note: str | None = None) -> None:
    raw = compose(Outbound("a@x.test", "b@y.test", message, "<1@x.test>", NOW, note=note))
    parsed = parse(raw)
    assert parsed.problems == (), parsed.problems
    assert parsed.valid and parsed.oops is None
    assert parsed.type is MessageType(message.type)
    assert parsed.message == message


@pytest.mark.parametrize("kind", sorted(BY_TYPE))
def test_round_trip_every_type(kind: str) -> None:
    @SETTINGS
    @given(BY_TYPE[kind])
    def run(message: Message) -> None:
        _round_trip(message)

    run()


@SETTINGS
@given(any_message, st.text(max_size=60).filter(lambda s: not any(c in s for c in "\r\n\x00")))
def test_round_trip_with_any_subject_note(message: Message, note: str) -> None:
    _round_trip(message, note)


def _invariants(raw: bytes) -> None:
    p = parse(raw)
    assert "parser_error" not in p.warnings
    if p.valid:
        assert p.protocol and p.oops is None and p.problems == () and p.message is not None
    if p.oops is not None:
        assert p.protocol and not p.valid and p.type is not MessageType.OOPS
        assert p.problems and p.problems[0].code is p.oops
    if not p.protocol:
        assert p.type is None and p.oops is None and not p.valid


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=2000))
def test_any_bytes_give_a_parsed_value(raw: bytes) -> None:
    _invariants(raw)


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(["PAY", "WHICH", "OOPS", "ORDER", "FOO", "Re: PAY", "=?utf-8?q?PAY?="]),
    st.binary(max_size=1500),
    st.sampled_from(
        [
            "text/plain",
            "application/json",
            "text/html",
            "multipart/mixed; boundary=b",
            "text/plain; charset=hex",
            "text/plain; charset=utf-16",
            "application/json; charset=zlib",
        ]
    ),
)
def test_any_body_under_a_protocol_subject(subject: str, body: bytes, ctype: str) -> None:
    head = f"Subject: {subject}\r\nFrom: a@x.test\r\nContent-Type: {ctype}\r\n\r\n".encode()
    _invariants(head + body)
