"""ParseOptions(in_our_thread=True): a person's `Re:` reply to one of our messages is
read by its body's JSON `type` (SPEC.md "Replies in our thread; mail that is not
protocol"). The option is the receiver's knowledge; without it nothing changes."""

from __future__ import annotations

from functools import partial

import pytest

from envelopay.engine.inbound import _reply_parser
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import MessageType, Pay
from envelopay.protocol.parse import REPLY_HINT, ParseOptions, parse

THREAD = ParseOptions(in_our_thread=True)
PAY = (
    '{"v": "0.1.0", "type": "pay", "id": "p1", "amount": "100", "token": "TOK", "chain": "c",'
    ' "proof": {"tx": "t"}}'
)
ORIGINAL = '> INVOICE\r\n> {"v": "0.1.0", "type": "invoice"}\r\n'


def reply(subject: str, body: str) -> bytes:
    return (
        f"From: ann@client.test\r\nTo: w@garden.test\r\nSubject: {subject}\r\n"
        "Message-ID: <r1@client.test>\r\nIn-Reply-To: <inv@garden.test>\r\n\r\n"
        f"{body}\r\n\r\nOn Monday w@garden.test wrote:\r\n{ORIGINAL}"
    ).encode()


@pytest.mark.parametrize("subject", ["Re: INVOICE | 0.25 USDC", "RE: Re: INVOICE", "[shop] Re: INVOICE | x"])
def test_a_reply_is_read_by_its_json_only_in_our_thread(subject: str) -> None:
    raw = reply(subject, PAY)
    alone = parse(raw)
    assert (alone.protocol, alone.oops) == (False, None)  # v0.1: a Re: is not protocol
    ours = parse(raw, options=THREAD)
    assert (ours.protocol, ours.type, ours.valid) == (True, MessageType.PAY, True)
    assert isinstance(ours.message, Pay) and ours.message.id == "p1"
    assert any(w.startswith("reply in our thread") for w in ours.warnings)


@pytest.mark.parametrize("subject", ["Fwd: INVOICE", "Re: Fwd: INVOICE", "INVOICE (fwd)", "Hello"])
def test_forwards_and_other_subjects_are_never_read(subject: str) -> None:
    assert parse(reply(subject, PAY), options=THREAD).protocol is False


@pytest.mark.parametrize(
    ("typed", "code"),
    [
        (PAY.replace('"t"}', '"t"},'), OopsCode.INVALID_JSON),  # a trailing comma
        ("{'v': '0.1.0', 'type': 'pay'}", OopsCode.INVALID_JSON),  # single quotes
        ('{"v": "0.1.0", "amount": "100"}', OopsCode.MISSING_FIELD),
        ('{"v": "0.1.0", "type": "payment"}', OopsCode.UNKNOWN_TYPE),
        (PAY.replace('"amount": "100", ', ""), OopsCode.MISSING_FIELD),  # a later stage, its code
    ],
)
def test_an_unreadable_reply_gets_a_code_and_how_to_write_it(typed: str, code: OopsCode) -> None:
    got = parse(reply("Re: INVOICE", typed), options=THREAD)
    assert (got.protocol, got.valid, got.oops) == (True, False, code)
    later_stage = code is OopsCode.MISSING_FIELD and got.problems[0].field != "type"
    assert (REPLY_HINT in got.problems[0].detail) is not later_stage


def test_prose_in_our_thread_stays_prose() -> None:
    got = parse(reply("Re: INVOICE", "Thanks, I will pay tomorrow."), options=THREAD)
    assert (got.protocol, got.oops) == (False, None)


def test_the_engine_reads_replies_with_the_mailbox_profile() -> None:
    lenient = _reply_parser(partial(parse, options=ParseOptions(profile="lenient", max_bytes=5000)))
    assert isinstance(lenient, partial)
    want = ParseOptions(profile="lenient", max_bytes=5000, in_our_thread=True)
    assert lenient.keywords["options"] == want
    assert _reply_parser(parse).keywords["options"] == THREAD  # type: ignore[attr-defined]
    # Under lenient, L1 (a first line `TYPE | note`) still comes first.
    raw = reply("Re: WHICH", "METHODS | our rails\r\n" + PAY.replace('"pay"', '"methods"'))
    assert lenient(raw).type is MessageType.METHODS
