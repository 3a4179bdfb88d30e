"""Quick mail (protocol/quick.py): what a node lets pass bulk mail. A scheduling hint read
from the header block only; it must never raise, whatever the bytes."""

from __future__ import annotations

import random

import pytest

from envelopay.protocol.quick import is_quick_mail, is_quick_type


@pytest.mark.parametrize(
    ("raw", "quick"),
    [
        (b"From: a@x\r\nSubject: WHICH\r\n\r\n{}", True),
        (b"From: a@x\r\nSubject: METHODS | what I take\r\n\r\n{}", True),
        (b"subject: which\n\n{}", True),  # case, LF line ends, first line
        (b"From: a@x\r\nSUBJECT:   WAIT|working\r\n\r\n", True),
        (b"From: a@x\r\nSubject: WHATSUP\r\n\r\n", True),
        (b"From: a@x\r\nSubject: ORDER\r\n\r\n", False),
        (b"From: a@x\r\nSubject: PAY | WHICH\r\n\r\n", False),  # the keyword comes first
        (b"From: a@x\r\nSubject: Re: WHICH\r\n\r\n", False),  # a person's reply: not quick
        (b"From: a@x\r\nX-Subject: WHICH\r\n\r\n", False),
        (b"From: a@x\r\n\r\nSubject: WHICH\r\n", False),  # in the body
        (b"From: a@x\n\nSubject: WHICH\n", False),
        (b"", False),
        (b"\xff\xfe\x00", False),
    ],
)
def test_the_subject_keyword_decides(raw: bytes, quick: bool) -> None:
    assert is_quick_mail(raw) is quick


def test_message_types() -> None:
    kinds = ("which", "methods", "wait", "whatsup", "order", "pay", "oops", "fulfill", "invoice", "offer",
             "accept")
    assert [t for t in kinds if is_quick_type(t)] == ["which", "methods", "wait", "whatsup"]


def test_no_bytes_make_it_raise() -> None:
    rng = random.Random(4)
    pieces = [b"Subject:", b"subject: ", b"WHICH", b"|", b"\r\n", b"\n", b" ", b"\t", b"\xff", b"\x00",
              b"Re:"]
    for _ in range(5000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 30)))
        assert isinstance(is_quick_mail(raw), bool)
