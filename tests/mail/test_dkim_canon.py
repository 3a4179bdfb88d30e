"""The relaxed canonicalization's byte replaces give what RFC 6376 3.4.2 and 3.4.4 read
as regexes give, on bodies and header values made of the characters that matter."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from envelopay.dkim.canon import relaxed_body, relaxed_header

_PIECES = st.sampled_from([b"a", b" ", b"  ", b"\t", b" \t ", b"\r", b"\n", b"\r\n", b"\r\n\t", b"\xff"])


def _header_reference(name: bytes, value: bytes) -> bytes:
    value = re.sub(rb"[\t ]+", b" ", re.sub(rb"\r?\n", b"", value)).strip(b" ")
    return name.lower().rstrip(b" \t") + b":" + value + b"\r\n"


def _body_reference(body: bytes) -> bytes:
    body = re.sub(rb"[\t ]+", b" ", re.sub(rb"[\t ]+\r\n", b"\r\n", body))
    if body.endswith(b" "):
        body = body.rstrip(b" ")
    while body.endswith(b"\r\n"):
        body = body[:-2]
    return body + b"\r\n" if body else b""


@settings(max_examples=3000, deadline=None)
@given(st.sampled_from([b"X-A", b"Subject", b"FROM \t"]), st.lists(_PIECES, max_size=16).map(b"".join))
def test_relaxed_header_is_the_regex_reading(name: bytes, value: bytes) -> None:
    assert relaxed_header(name, value) == _header_reference(name, value)


@settings(max_examples=3000, deadline=None)
@given(st.lists(_PIECES, max_size=24).map(b"".join))
def test_relaxed_body_is_the_regex_reading(body: bytes) -> None:
    assert relaxed_body(body) == _body_reference(body)


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from([b"From", b"from", b"FROM", b"To", b"Subject", b"X-A"]), max_size=8),
       st.lists(st.sampled_from([b"from", b"to", b"subject", b"x-a", b"cc"]), max_size=10))
def test_the_fast_path_selects_headers_as_dkimpy_does(names: list[bytes], include: list[bytes]) -> None:
    from dkim import select_headers

    from envelopay.dkim.canon import _select

    headers = [(n, b" v%d\r\n" % i) for i, n in enumerate(names)]
    assert _select(headers, [n.decode("ascii") for n in include]) == select_headers(headers, include)
