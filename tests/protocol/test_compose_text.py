"""The text part compose writes reads well in a terminal mail client (issue 30 item 3):
the message's JSON alone, indented, so mutt shows one field a line instead of one long
line, and still the whole text part is the JSON for the simplest receiver (SPEC.md
"Composing"); our own parser reads it back without the JSON part."""

from __future__ import annotations

import email
import json
from datetime import UTC, datetime
from email import policy

from hypothesis import HealthCheck, given, settings
from tests.protocol.strategies import any_message

from envelopay.protocol import Invoice, Message, Outbound, compose, message_json, parse

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INVOICE = Invoice(id="inv_1", order_ref="ord_1", amount=250_000, token="USDC", chain="solana-local",
                  wallet="6dL6n77jJFWq4bu3cQp57H8rMUPEXu7uYN1XApPxpUif",
                  note="word_count: 0.25 USDC on solana-local")


def _text_part(raw: bytes) -> tuple[str, str]:
    msg = email.message_from_bytes(raw, policy=policy.default)
    plain = next(p for p in msg.walk() if p.get_content_type() == "text/plain")
    return str(plain.get_content()).replace("\r\n", "\n"), str(plain["Content-Transfer-Encoding"])


def test_the_text_part_is_the_json_indented() -> None:
    raw = compose(Outbound("a@x.test", "b@y.test", INVOICE, "<1@x.test>", NOW))
    text, cte = _text_part(raw)
    assert cte == "7bit"  # ASCII, every line far below 998 characters: readable raw too
    assert json.loads(text) == json.loads(message_json(INVOICE))
    lines = text.splitlines()
    # `v`, `type`, then the human note: the sentence a person reads first, under the subject.
    assert lines[:4] == [
        "{", '  "v": "0.1.0",', '  "type": "invoice",', '  "note": "word_count: 0.25 USDC on solana-local",'
    ]
    assert lines[-1] == "}" and len(lines) == 11  # one field a line
    assert '  "amount": "250000",' in lines  # the JSON keeps its smallest units
    assert max(len(line) for line in raw.split(b"\r\n")) <= 998


def test_long_and_non_ascii_text_goes_quoted_printable_and_decodes_to_the_same_lines() -> None:
    message = INVOICE.model_copy(update={"note": "ü" + "x" * 2000})
    text, cte = _text_part(compose(Outbound("a@x.test", "b@y.test", message, "<2@x.test>", NOW)))
    assert cte == "quoted-printable"
    assert json.loads(text) == json.loads(message_json(message))
    assert text.splitlines()[3] == f'  "note": "{message.note}",'  # decoded back to whole lines


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_message)
def test_our_parser_reads_the_text_part_alone(message: Message) -> None:
    # A receiver (or a gateway) that keeps only the text part still has the message.
    raw = compose(Outbound("a@x.test", "b@y.test", message, "<3@x.test>", NOW))
    text, _ = _text_part(raw)
    single = (
        f"From: a@x.test\r\nTo: b@y.test\r\nSubject: {message.type.upper()} | x\r\nMessage-ID: <3@x.test>\r\n"
        "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n"
    ).encode() + text.encode("utf-8")
    p = parse(single)
    assert p.valid and p.message == message
