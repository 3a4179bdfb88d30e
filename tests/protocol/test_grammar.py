"""Subject grammar: spec v0.1.0 "Subject parsing", and the v0.2.0 Re: option."""

from __future__ import annotations

import pytest

from envelopay.protocol.grammar import KEYWORDS, classify_subject, decode_subject, format_subject
from envelopay.protocol.messages import MessageType


def test_the_nine_keywords_in_spec_order() -> None:
    assert KEYWORDS == ("WHICH", "METHODS", "PAY", "ORDER", "FULFILL", "INVOICE", "OFFER", "ACCEPT", "OOPS")


@pytest.mark.parametrize(
    "subject,kind,note",
    [
        ("PAY", MessageType.PAY, None),
        ("PAY | Dinner", MessageType.PAY, "Dinner"),
        ("PAY|Dinner", MessageType.PAY, "Dinner"),
        ("  OOPS  |  spaced  ", MessageType.OOPS, "spaced"),
        ("ORDER | a | b", MessageType.ORDER, "a | b"),
        ("ACCEPT |", MessageType.ACCEPT, ""),
        ("WHICH\t|\tx", MessageType.WHICH, "x"),
    ],
)
def test_protocol_subjects(subject: str, kind: MessageType, note: str | None) -> None:
    form = classify_subject(subject)
    assert form.protocol and form.type is kind and form.note == note and form.keyword == kind.keyword


@pytest.mark.parametrize(
    "subject",
    [
        "Re: PAY",
        "RE:PAY",
        "re : PAY",
        "Fwd: PAY",
        "FW: PAY",
        "fwd:PAY | x",
        "pay",
        "Pay | x",
        "PAY now",
        "PAY2",
        "",
        "(x) PAY",
        "PAY | x (fwd)",
        "[Fwd: PAY]",
        "[list] Re: PAY",
        "PAY\n| x",
    ],
)
def test_not_protocol_under_v01(subject: str) -> None:
    form = classify_subject(subject)
    assert not form.protocol and form.type is None and form.reason


def test_missing_subject_is_not_protocol() -> None:
    assert classify_subject(None).protocol is False


@pytest.mark.parametrize("subject", ["Re: PAY | x", "RE: re:Re : PAY | x", "Re:PAY|x"])
def test_v02_strips_one_or_more_re(subject: str) -> None:
    form = classify_subject(subject, re_prefix="v0.2")
    assert form.protocol and form.type is MessageType.PAY


@pytest.mark.parametrize("subject", ["Fwd: PAY", "Re: Fwd: PAY", "Re: FW: PAY", "Re: pay"])
def test_v02_never_strips_fwd(subject: str) -> None:
    assert classify_subject(subject, re_prefix="v0.2").protocol is False


@pytest.mark.parametrize("subject", ["REFUND", "PAYMENT | x", "A|b", "URGENT"])
def test_unknown_keyword_is_protocol_without_a_type(subject: str) -> None:
    form = classify_subject(subject)
    assert form.protocol and form.type is None and form.keyword == subject.split("|")[0].strip()


def test_decode_subject() -> None:
    assert decode_subject("=?utf-8?q?PAY_=7C_caf=C3=A9?=") == ("PAY | café", True)
    assert decode_subject("=?utf-8?b?UEFZ?= =?utf-8?b?IHwgeA==?=") == ("PAY | x", True)
    assert decode_subject("plain") == ("plain", True)
    # Undecodable words come back raw (so they never match the grammar), flagged.
    assert decode_subject("=?utf-8?b?!!!notbase64?=") == ("=?utf-8?b?!!!notbase64?=", False)
    assert decode_subject("=?x-unknown?q?PAY?=") == ("=?x-unknown?q?PAY?=", False)
    assert decode_subject("=?utf-8?b?/w==?=")[1] is False  # invalid UTF-8
    # CR/LF can come out of an encoded-word: parse() refuses it, grammar never matches it.
    assert decode_subject("=?utf-8?q?PAY_=7C_x=0D=0AB?=") == ("PAY | x\r\nB", True)
    assert classify_subject("PAY | x\r\nB").protocol is False


def test_format_subject() -> None:
    assert format_subject(MessageType.PAY, None) == "PAY"
    assert format_subject(MessageType.PAY, "  ") == "PAY"
    assert format_subject(MessageType.INVOICE, " x ") == "INVOICE | x"
