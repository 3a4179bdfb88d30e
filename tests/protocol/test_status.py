"""The `status` extension's protocol layer (SPEC.md "Status while working"): WAIT and
WHATSUP are types only to a receiver that speaks `status`; to everyone else (the
default, the conformance corpus) they stay the spec's unknown_type. Their parser paths
are fuzzed like the nine's."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopay.protocol import OopsCode, Outbound, compose, parse
from envelopay.protocol.grammar import KEYWORDS, SUPPORTED_TYPES_TEXT, classify_subject
from envelopay.protocol.messages import (
    SPEC_TYPES,
    MessageType,
    Methods,
    Order,
    RailMethod,
    Wait,
    Whatsup,
    Which,
)
from envelopay.protocol.parse import ParseOptions, parser_options
from envelopay.protocol.status import JOB_STATES, advertises, body_advertises, stamp, state_line, wait_message

STATUS = ParseOptions(extensions=frozenset({"status"}))
WHEN = datetime(2026, 12, 4, 23, 1, 2, tzinfo=UTC)


def _raw(subject: str, body: object, *, ctype: str = "application/json") -> bytes:
    text = body if isinstance(body, str) else json.dumps(body)
    return (
        f"From: w@x.test\r\nTo: b@y.test\r\nSubject: {subject}\r\nMessage-ID: <s1@x.test>\r\n"
        f"Content-Type: {ctype}; charset=utf-8\r\n\r\n{text}"
    ).encode()


WAIT_BODY = {"v": "0.1.0", "type": "wait", "id": "wait_1", "order_ref": "ord_1", "state": "running",
             "at": {"queued": "2026-12-04T23:01:02Z", "running": "2026-12-04T23:01:03Z"}}
WHATSUP_BODY = {"v": "0.1.0", "type": "whatsup", "id": "wsup_1", "order_ref": "ord_1"}


def test_the_nine_stay_nine() -> None:
    assert len(SPEC_TYPES) == 9 and MessageType.WAIT not in SPEC_TYPES
    assert "WAIT" not in KEYWORDS and "WHATSUP" not in SUPPORTED_TYPES_TEXT


@pytest.mark.parametrize("subject", ["WAIT", "WAIT | running", "WHATSUP", "WHATSUP | ord_1?"])
def test_a_strict_receiver_reads_the_keywords_as_the_spec_says(subject: str) -> None:
    body = WAIT_BODY if subject.startswith("WAIT ") or subject == "WAIT" else WHATSUP_BODY
    p = parse(_raw(subject, body))
    assert p.protocol and p.type is None and not p.valid and p.oops is OopsCode.UNKNOWN_TYPE
    assert "WAIT" not in p.problems[0].detail.split("supported types:")[1]


def test_a_status_receiver_reads_wait_and_whatsup() -> None:
    w = parse(_raw("WAIT | running", WAIT_BODY), options=STATUS)
    assert w.valid and w.type is MessageType.WAIT and isinstance(w.message, Wait)
    assert w.message.state == "running" and w.message.at["running"] == "2026-12-04T23:01:03Z"
    q = parse(_raw("WHATSUP", WHATSUP_BODY), options=STATUS)
    assert q.valid and isinstance(q.message, Whatsup) and q.message.order_ref == "ord_1"
    assert classify_subject("WAIT", extensions=frozenset({"other"})).type is None


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({k: v for k, v in WAIT_BODY.items() if k != "state"}, OopsCode.MISSING_FIELD),
        ({k: v for k, v in WAIT_BODY.items() if k != "order_ref"}, OopsCode.MISSING_FIELD),
        ({**WAIT_BODY, "state": "Running!"}, OopsCode.INVALID_FIELD),
        ({**WAIT_BODY, "state": 3}, OopsCode.INVALID_FIELD),
        ({**WAIT_BODY, "at": ["queued"]}, OopsCode.INVALID_FIELD),
        ({**WAIT_BODY, "at": {"queued": 5}}, OopsCode.INVALID_FIELD),
        ({**WAIT_BODY, "at": {f"s{i}": "t" for i in range(17)}}, OopsCode.INVALID_FIELD),
        ({**WAIT_BODY, "v": "9.0"}, OopsCode.UNSUPPORTED_VERSION),
        ({**WAIT_BODY, "type": "fulfill", "state": None}, OopsCode.TYPE_MISMATCH),
    ],
)
def test_a_bad_wait_gets_the_usual_codes(body: dict[str, object], code: OopsCode) -> None:
    p = parse(_raw("WAIT", body), options=STATUS)
    assert not p.valid and p.oops is code, p.problems


def test_unknown_fields_and_states_are_read_not_refused() -> None:
    # A later worker may add a state; a reader shows it (SPEC: unknown fields ignored).
    p = parse(_raw("WAIT", {**WAIT_BODY, "state": "paused", "eta": "soon"}), options=STATUS)
    assert p.valid and isinstance(p.message, Wait) and p.message.state == "paused"
    assert p.body is not None and p.body["eta"] == "soon"


@pytest.mark.parametrize("message", [
    wait_message(id="wait_9", order_ref="ord_9", state="running",
                 times={"running": WHEN + timedelta(seconds=1), "queued": WHEN}, ref="wsup_9"),
    Whatsup(id="wsup_9", order_ref="ord_9", note="how is it going?"),
])
def test_compose_then_parse_gives_the_message_back(message: Wait | Whatsup) -> None:
    out = Outbound("w@x.test", "b@y.test", message, "<c1@x.test>", WHEN)
    raw = compose(out)
    assert raw.count(b"Subject: " + message.type.upper().encode()) == 1
    back = parse(raw, options=STATUS)
    assert back.valid and back.message == message
    assert parse(raw).oops is OopsCode.UNKNOWN_TYPE  # and a strict reader: unknown_type


def test_wait_lists_times_in_state_order_and_in_utc() -> None:
    later = datetime(2026, 12, 5, 1, 1, 3, tzinfo=timezone(timedelta(hours=2)))
    w = wait_message(id="w", order_ref="o", state="done", times={"done": later, "queued": WHEN})
    assert list(w.at) == ["queued", "done"] and w.at["done"] == "2026-12-04T23:01:03Z"
    assert state_line(w) == "done (queued 2026-12-04T23:01:02Z, done 2026-12-04T23:01:03Z)"
    with pytest.raises(ValueError, match="timezone-aware"):
        stamp(datetime(2026, 1, 1))
    assert set(JOB_STATES) >= {"queued", "running", "done", "failed", "refunded"}


def test_advertising() -> None:
    rail = RailMethod(chain="c", token="T", wallet="W", price=1)
    assert advertises(Methods(rails=[rail], extensions=["status"]))
    assert advertises(Order(id="o", task="t", extensions=["x", "status"]))
    assert advertises(Which(extensions=["status"]))
    assert not advertises(Which()) and not advertises(Order(id="o", task="t", extensions=[]))
    assert body_advertises({"extensions": ["status"]}) and not body_advertises({"extensions": "status"})
    assert not body_advertises(None) and not body_advertises({})
    # A body without the field composes without it: a strict peer sees nothing new.
    out = compose(Outbound("w@x.test", "b@y.test", Order(id="o", task="t"), "<c2@x.test>", WHEN))
    assert b"extensions" not in out


def test_parser_options_are_read_back_from_a_wired_parser() -> None:
    from functools import partial

    assert parser_options(partial(parse, options=STATUS)).extensions == {"status"}
    assert parser_options(parse).extensions == frozenset()
    assert parser_options(len).extensions == frozenset()


# ------------------------------------------------------------------ fuzz

_TOKENS = [b"{", b"}", b'"state":', b'"at":', b'"order_ref":', b"\r\n", b"\x00", b"\xff", b'"', b"[", b"]",
           b"WAIT", b"WHATSUP", b"Re: ", b"|", b"=?utf-8?q?", b"--", b"null", b"1e999", b"\\u0000"]


def _mutate(rng: random.Random, raw: bytes) -> bytes:
    data = bytearray(raw)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(data))
        op = rng.randrange(4)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            del data[pos : pos + rng.randint(1, 40)]
        elif op == 2:
            data[pos:pos] = rng.choice(_TOKENS)
        else:
            data[pos:pos] = data[: rng.randint(0, 60)]
    return bytes(data)


def test_fuzz_status_messages_never_break_the_parser() -> None:
    rng = random.Random(20261204)
    seeds = [compose(Outbound("w@x.test", "b@y.test", m, "<f@x.test>", WHEN)) for m in (
        wait_message(id="w1", order_ref="o1", state="queued", times={"queued": WHEN}),
        Whatsup(id="q1", order_ref="o1"),
    )] + [_raw("WAIT | x", WAIT_BODY, ctype="text/plain"), _raw("WHATSUP", WHATSUP_BODY)]
    outcomes: set[str] = set()
    for i in range(6000):
        raw = _mutate(rng, rng.choice(seeds))
        for opts in (STATUS, ParseOptions()):
            p = parse(raw, options=opts)
            assert "parser_error" not in p.warnings, (i, raw[:300])
            if p.valid:
                assert p.message is not None and p.oops is None and not p.problems
            if p.type in (MessageType.WAIT, MessageType.WHATSUP):
                assert opts is STATUS  # a strict reader never returns an extension type
            if p.oops is not None:
                assert p.problems[0].code is p.oops
            outcomes.add(p.oops.value if p.oops else ("valid" if p.valid else "none"))
    assert {"valid", "unknown_type", "invalid_json", "missing_field", "invalid_field"} <= outcomes, outcomes


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["v", "type", "id", "order_ref", "state", "at", "ref", "note"]),
                       st.one_of(st.none(), st.integers(), st.text(max_size=40),
                                 st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
                                 st.lists(st.text(max_size=4), max_size=3))))
def test_any_wait_body_is_a_value(body: dict[str, object]) -> None:
    for subject in ("WAIT", "WHATSUP"):
        p = parse(_raw(subject, body), options=STATUS)
        assert "parser_error" not in p.warnings
        assert p.valid == (p.oops is None) or p.type is None
