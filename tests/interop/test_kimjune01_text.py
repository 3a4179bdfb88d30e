"""Our indented text part (issue 30 item 3) against the author's three JSON extractors,
for any message: the whole text part is the JSON, and no line of it is a JSON object
on its own, so a line-first reader falls back to the whole text (tests/interop/_kimjune01.py,
fixtures/interop/kimjune01/README.md "Extraction rules it applies")."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import HealthCheck, given, settings
from tests.interop import _kimjune01 as them
from tests.protocol.strategies import any_message

from envelopay.protocol import Message, Outbound, compose, message_json


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_message)
def test_each_of_their_extractors_reads_our_indented_text_part(message: Message) -> None:
    raw = compose(Outbound("a@x.test", "b@y.test", message, "<t@x.test>", datetime(2026, 11, 30, tzinfo=UTC)))
    text = them.receive(raw).text
    assert len(text.strip().splitlines()) > 1  # indented: one field a line, not one long line
    wire = json.loads(message_json(message))
    for rule in ("whole_then_line", "whole_only", "line_then_whole"):
        assert them.extract(rule, text) == wire, rule
