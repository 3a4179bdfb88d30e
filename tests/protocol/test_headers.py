"""protocol.headers: the one header reader. Each rule, and agreement between the readers
that use it (the parser and DKIM): a block one refuses, the other refuses too."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envelopay import dkim
from envelopay.protocol.headers import HeaderBlock, HeaderRefusal, read_headers
from envelopay.protocol.parse import parse

GOOD = b"From: a@x.test\r\nTo: b@y.test\r\nSubject: WHICH\r\n\r\nbody\r\n"


def test_a_plain_block_reads_fields_in_order_with_raw_bytes() -> None:
    read = read_headers(b"From: a@x.test\r\nX-Long: one\r\n\ttwo\r\nSubject: WHICH\r\n\r\nbody\r\n")
    assert isinstance(read, HeaderBlock)
    assert [f.name for f in read.fields] == ["from", "x-long", "subject"]
    assert read.fields[1].raw_value == b" one\r\n\ttwo\r\n" and read.fields[1].value == "one\ttwo"
    assert read.one("FROM") == "a@x.test" and read.body == b"body\r\n"


def test_lf_only_lines_read_as_crlf() -> None:
    read = read_headers(GOOD.replace(b"\r\n", b"\n"))
    assert isinstance(read, HeaderBlock) and read.one("subject") == "WHICH" and read.body == b"body\n"
    assert all(f.raw_value.endswith(b"\r\n") for f in read.fields)


def test_no_blank_line_means_all_header() -> None:
    read = read_headers(b"From: a@x.test\r\nSubject: WHICH\r\n")
    assert isinstance(read, HeaderBlock) and read.body == b"" and read.one("subject") == "WHICH"


@pytest.mark.parametrize(
    ("raw", "reason", "line"),
    [
        (b"From alice@x.test Mon Nov 30 12:00:00 2026\r\n" + GOOD, "mbox_from_line", 1),
        (b"From : mallory@evil.test\r\n" + GOOD[16:], "space_before_colon", 1),
        (b"Subject\t: WHICH\r\n\r\n", "space_before_colon", 1),
        (b"X-Pad: a\rFrom: buyer@x.test\r\n" + GOOD[16:], "bare_cr", 1),
        (b"From: a@x.test\r\rSubject: WHICH\r\n\r\n", "bare_cr", 1),
        (b" folded first\r\n" + GOOD, "leading_continuation", 1),
        (b"From: a@x.test\r\n \t\r\nSubject: WHICH\r\n\r\n", "blank_continuation", 2),
        (b"From: a@x.test\r\nthis is not a header\r\n\r\n", "not_a_field", 2),
        (b"From: a@x.test\r\nSubj\x00ect: x\r\n\r\n", "nul", 0),
        (GOOD.replace(b"Subject: WHICH", b"Subject: WHICH\r\nsubject: PAY"), "duplicate", 0),
    ],
)
def test_refusals(raw: bytes, reason: str, line: int) -> None:
    read = read_headers(raw)
    assert isinstance(read, HeaderRefusal) and read.reason == reason and read.line == line


def test_a_refusal_keeps_the_fields_read_before_it_for_addressing_only() -> None:
    read = read_headers(b"From: a@x.test\r\nSubject: PAY\r\nX-Pad: a\rFrom: b@y.test\r\n\r\n{}")
    assert isinstance(read, HeaderRefusal) and read.reason == "bare_cr"
    assert read.one("from") == "a@x.test" and read.one("subject") == "PAY"
    dup = read_headers(b"From: a@x.test\r\nFrom: b@y.test\r\n\r\n")
    assert isinstance(dup, HeaderRefusal) and dup.field == "from" and dup.one("from") is None


# The attack of issue 11, item 3: one reader saw From mallory, another From buyer.
ATTACK = (
    b"From : mallory@evil.test\r\n"
    b"X-Pad: a\rFrom: buyer@agents.test\r\n"
    b"To: worker@garden.local\r\nSubject: PAY\r\nMessage-ID: <a1@evil.test>\r\n\r\n{}\r\n"
)


def test_the_attack_message_is_refused_by_the_parser() -> None:
    p = parse(ATTACK)
    assert not p.valid and p.from_addr is None
    assert any("header_refused" in w for w in p.warnings)


async def test_the_attack_message_is_refused_by_dkim() -> None:
    result = await dkim.verify(ATTACK, dns=dkim.table_dns({}))
    assert result.status != "pass" and result.from_address is None and "header refused" in result.detail


_LINES = st.sampled_from(
    [
        b"From: a@x.test",
        b"From: Bob <b@y.test>",
        b"From : m@evil.test",
        b"From m@evil.test Mon Nov 30 12:00:00 2026",
        b"X-Pad: a\rFrom: c@z.test",
        b"Subject: WHICH",
        b"Subject: PAY",
        b"To: w@garden.local",
        b" folded",
        b" ",
        b"X-Note: n",
        b"junk line",
        b"Message-ID: <m@x.test>",
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=8), st.sampled_from([b"\r\n", b"\n"]))
def test_parser_and_dkim_accept_the_same_blocks_and_read_the_same_from(
    lines: list[bytes], eol: bytes
) -> None:
    raw = eol.join(lines) + eol + eol + b"{}" + eol
    read = read_headers(raw)
    try:
        dkim_headers, _ = dkim.split_message(dkim.to_crlf(raw))
        dkim_accepts = True
    except Exception:
        dkim_headers, dkim_accepts = [], False
    assert dkim_accepts is isinstance(read, HeaderBlock)
    p = parse(raw)
    if not dkim_accepts:
        assert any(w.startswith("header_refused:") for w in p.warnings)
        return
    dkim_from = dkim.from_address_of(dkim_headers)
    if p.from_addr is not None or dkim_from is not None:
        assert p.from_addr is not None and dkim_from is not None
        assert p.from_addr.lower() == dkim_from.lower()


def test_a_remembered_reading_is_the_reading_and_only_small_mails_are_kept() -> None:
    from envelopay.protocol import headers

    small = b"From: a@x.test\r\nSubject: WHICH\r\n\r\n{}\r\n"
    first = read_headers(small)
    assert read_headers(bytes(bytearray(small))) is first  # an equal mail: the kept answer
    assert read_headers(small.replace(b"WHICH", b"ORDER")) != first
    big = small + b"x" * (64 * 1024)
    assert read_headers(big) == headers._read(big)
    assert read_headers(big) is not read_headers(big)  # over 64 KiB: never kept
    assert headers._read_remembered.cache_info().maxsize == 32


_PIECES = st.sampled_from(
    [b"From: a@x.test", b"Subject: WHICH", b"X-Note: n", b"X-Note:", b"X-Empty:  ", b" folded", b"\tfolded",
     b"  ", b"\t", b"From : m@evil.test", b"junk", b"X-Pad: a\rb", b"X-Nul: \x00", b"X-8bit: \xc3\xa9\xff",
     b"From m@evil.test Mon", b"A:B:C", b":no-name", b"X-\x7f: del", b"DKIM-Signature: v=1;", b" b=abc;",
     b"Message-ID: <m@x.test>", b"To: w@garden.local", b"", b"\r"]
)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.tuples(_PIECES, st.sampled_from([b"\r\n", b"\n", b"\r\r\n", b"\n\r"])), max_size=10),
       st.booleans())
def test_the_whole_block_reading_is_the_line_by_line_reading(
    lines: list[tuple[bytes, bytes]], end_with_eol: bool
) -> None:
    """The regex reading of a well-formed block (`_read_whole`) gives what the line-by-line
    reading gives, on every block it takes; the rest is the line reader's to refuse."""
    from envelopay.protocol import headers

    head = b"".join(line + eol for line, eol in lines)
    if not end_with_eol and lines:
        head = head[: -len(lines[-1][1])]
    raw = head + b"\r\n\r\nbody"
    split_head, body = headers.split_at_blank_line(raw)
    if split_head.endswith(b"\n"):
        split_head = split_head[:-2] if split_head.endswith(b"\r\n") else split_head[:-1]
    if not split_head:
        return
    whole = headers._read_whole(split_head, body)
    lines_read = headers._read_lines(split_head, body)
    if whole is not None:
        assert whole == lines_read
    assert headers._read(raw) == lines_read


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from([b"a", b":", b" ", b"\r", b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\n\r\n"]),
                max_size=14))
def test_the_blank_line_is_where_the_rfc_pattern_finds_it(pieces: list[bytes]) -> None:
    """split_at_blank_line's byte searches find the first CRLF/LF empty line as the
    pattern \\r?\\n\\r?\\n does (leftmost match)."""
    import re

    from envelopay.protocol.headers import split_at_blank_line

    raw = b"".join(pieces)
    if raw.startswith(b"\r\n"):
        expected = (b"", raw[2:])
    elif raw.startswith(b"\n"):
        expected = (b"", raw[1:])
    else:
        m = re.search(rb"\r?\n\r?\n", raw)
        expected = (raw, b"") if m is None else (raw[: m.start()], raw[m.end():])
    assert split_at_blank_line(raw) == expected
