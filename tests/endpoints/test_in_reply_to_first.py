"""settle_reply reads In-Reply-To from the header block before it parses a whole mail
(endpoints/calls.py): the header-only reading must find what read_tool_mail finds, for
every mail, or a call's answer would go unsettled (or a stranger's be read)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from envelopay.endpoints.toolmail import build_tool_mail, read_in_reply_to, read_tool_mail

NOW = datetime(2026, 12, 5, tzinfo=UTC)


def _samples() -> list[bytes]:
    built = build_tool_mail(sender="a@x.test", recipient="b@y.test", subject="Re: kv.get",
                            payload={"status": "ok", "result": 1}, human="ok",
                            message_id="<r1@y.test>", now=NOW, in_reply_to="<c1@x.test>")
    head = b"From: b@y.test\r\nTo: a@x.test\r\nSubject: Re\r\n"
    return [
        built,
        built.replace(b"\r\n", b"\n"),
        head + b"In-Reply-To: <c1@x.test>\r\n\r\nbody",
        head + b"In-Reply-To: <c1@x.test>\r\nIn-Reply-To: <c2@x.test>\r\n\r\nbody",  # duplicated
        head + b"In-Reply-To:\r\n <c1@x.test>\r\n\r\nbody",  # folded
        head + b"in-reply-to:   <c1@x.test>   \r\n\r\n",
        head + b"\r\nIn-Reply-To: <in-the-body@x.test>\r\n",  # after the header block
        head + b"X: y\r\n",  # no body, no blank line
        b"In-Reply-To: <c1@x.test>",
        b"",
        b"\xff\xfe In-Reply-To: <c1@x.test>\r\n\r\n",
        head + b"In-Reply-To: <c1@x.test>\r\nContent-Type: multipart/mixed; boundary=zz\r\n\r\n"
               b"--zz\r\nContent-Type: application/json\r\n\r\n{}\r\n--zz--\r\n",
    ]


def test_header_reading_agrees_with_the_whole_reading() -> None:
    for raw in _samples():
        assert read_in_reply_to(raw) == read_tool_mail(raw).in_reply_to, raw


def test_agrees_on_mutated_mail() -> None:
    rng = random.Random(5)
    base = _samples()
    for _ in range(3000):
        raw = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 4)):
            if not raw:
                break
            i = rng.randrange(len(raw))
            op = rng.randrange(3)
            if op == 0:
                raw[i] = rng.choice(b"\r\n: <>@\t-xI\xff")
            elif op == 1:
                del raw[i]
            else:
                raw[i:i] = rng.choice([b"\r\n", b"In-Reply-To: <z@q>\r\n", b" ", b"\r\n\r\n"])
        assert read_in_reply_to(bytes(raw)) == read_tool_mail(bytes(raw)).in_reply_to, bytes(raw)
