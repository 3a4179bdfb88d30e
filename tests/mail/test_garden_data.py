"""The garden reads DATA in a few reads (mail/garden_data.py) and answers as aiosmtpd's own
line-by-line reading does: the same streams, hostile ones included, sent over real sockets to
an LMTP server of each kind, get the same replies, and their handlers the same content."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiosmtpd.lmtp import LMTP

from envelopay.mail.garden_data import data_state, unstuff
from envelopay.mail.garden_lmtp import BulkDataLMTP


class _Recording:
    def __init__(self) -> None:
        self.contents: list[bytes] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.contents.append(bytes(envelope.original_content))
        return "250 kept"


async def _serve(cls: type[LMTP], handler: _Recording, size_limit: int) -> tuple[asyncio.Server, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: cls(handler, data_size_limit=size_limit, loop=loop),
                                      "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _transcript(port: int, stream: bytes, pieces: random.Random | None = None) -> bytes:
    """Everything the server said to one session that sends `stream` after DATA, then QUIT
    (all at once, or in pieces of 1-300 octets with a pause between: a CRLF or a ".\r\n"
    split across reads)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = b"LHLO x\r\nMAIL FROM:<a@x.test>\r\nRCPT TO:<b@y.test>\r\nDATA\r\n" + stream + b"QUIT\r\n"
    try:
        while pieces is not None and sent:
            cut = pieces.randint(1, 300)
            writer.write(sent[:cut])
            sent = sent[cut:]
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(sent)
        await writer.drain()
    except ConnectionError:
        pass  # the server hung up first (too many bogus commands): what it said is the answer
    said = await asyncio.wait_for(reader.read(), 10)  # up to the server's close after QUIT
    writer.close()
    return said


@pytest.fixture
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[int, int, _Recording, _Recording]]:
    size_limit = getattr(request, "param", 33_554_432)  # aiosmtpd's default
    ours, theirs = _Recording(), _Recording()
    a, port_a = await _serve(BulkDataLMTP, ours, size_limit)
    b, port_b = await _serve(LMTP, theirs, size_limit)
    try:
        yield port_a, port_b, ours, theirs
    finally:
        for server in (a, b):
            server.close()
            await server.wait_closed()


async def _same(pair: tuple[int, int, _Recording, _Recording], stream: bytes,
                seed: int | None = None) -> bytes:
    port_a, port_b, ours, theirs = pair
    cut = (lambda: random.Random(seed)) if seed is not None else (lambda: None)
    said_a, said_b = await asyncio.gather(_transcript(port_a, stream, cut()),
                                          _transcript(port_b, stream, cut()))
    assert said_a.replace(b"BulkDataLMTP", b"LMTP") == said_b, stream[:300]
    assert ours.contents == theirs.contents, stream[:300]
    return said_a


_LINES = [b"From: a@x.test", b"Subject: WHICH", b"", b".", b"..", b".hidden", b"a.", b"x" * 998,
          b"y" * 999, b"z" * 1000, b"w" * 1001, b"v" * 1002, b"u" * 2500, b"\tfolded", b"bare\nlf",
          b"bare\rcr", b"{\"v\": \"0.1.0\"}", b"end.", b"\xff\xfe", b"MAIL FROM:<c@x.test>", b"RSET"]


def _stream(rng: random.Random, lines_from: list[bytes] = _LINES, cuts: bool = True) -> bytes:
    lines = [rng.choice(lines_from) for _ in range(rng.randint(0, 12))]
    raw = b"".join(line + b"\r\n" for line in lines)
    if cuts and rng.random() < 0.3 and raw:  # a byte cut or doubled somewhere: lines that end oddly
        i = rng.randrange(len(raw))
        cut, doubled = raw[:i] + raw[i + rng.randint(0, 2):], raw[:i] + raw[i:i + 1] + raw[i:]
        raw = cut if rng.random() < 0.5 else doubled
    end = b".\r\n" if raw.endswith(b"\r\n") or not raw else b"\r\n.\r\n"  # a cut may leave a line open
    return raw + end + (b"NOOP\r\n" if rng.random() < 0.3 else b"")


async def test_a_protocol_mail_is_taken_whole_and_the_next_command_is_kept(
        pair: tuple[int, int, _Recording, _Recording]) -> None:
    mail = b"From: a@x.test\r\nSubject: PAY\r\n\r\n..hidden line\r\n{\"v\": \"0.1.0\"}\r\n"
    said = await _same(pair, mail.replace(b"..hidden", b"...hidden") + b".\r\nNOOP\r\n")
    assert b"250 kept" in said and b"250 OK" in said.split(b"250 kept")[1]  # NOOP answered after it
    assert pair[2].contents == [mail]


async def test_an_empty_message_and_one_of_empty_lines(pair: tuple[int, int, _Recording, _Recording]) -> None:
    await _same(pair, b".\r\n")
    await _same(pair, b"\r\n\r\n.\r\n")
    assert pair[2].contents == [b"", b"\r\n\r\n"]


async def test_a_line_too_long_is_refused_after_the_whole_message(
        pair: tuple[int, int, _Recording, _Recording]) -> None:
    said = await _same(pair, b"ok\r\n" + b"x" * 5000 + b"\r\nmore\r\n.\r\nNOOP\r\n")
    assert b"500 Line too long" in said and pair[2].contents == []


async def test_random_streams_get_the_same_answers(pair: tuple[int, int, _Recording, _Recording]) -> None:
    rng = random.Random(31)
    for _ in range(300):
        await _same(pair, _stream(rng))


async def test_random_streams_sent_in_pieces_get_the_same_answers(
        pair: tuple[int, int, _Recording, _Recording]) -> None:
    # One message each, no line of "." inside: a server that hangs up on the commands after
    # an early end would break the pipe of a client still sending its pieces.
    rng = random.Random(3)
    whole = [line for line in _LINES if line != b"."]
    for n in range(40):
        await _same(pair, _stream(rng, whole, cuts=False), seed=n)


@pytest.mark.parametrize("pair", [40, 1500], indirect=True)
async def test_random_streams_past_a_small_size_limit_get_the_same_answers(
        pair: tuple[int, int, _Recording, _Recording]) -> None:
    rng = random.Random(7)
    for _ in range(300):
        await _same(pair, _stream(rng))


def test_the_state_follows_aiosmtpds_order_within_a_line() -> None:
    # Longer than the limit before its CRLF: refused as too long before it is counted.
    assert data_state(b"a\r\n" + b"x" * 1002, 1001, 10) == "too_long"
    # Short enough to read (1001 octets) but too long with its CRLF: counted first.
    assert data_state(b"a\r\n" + b"x" * 1000 + b"\r\n", 1001, 10) == "too_much"
    assert data_state(b"a\r\n" + b"x" * 1000 + b"\r\n", 1001, 5000) == "too_long"
    assert data_state(b"a\r\n" + b"x" * 999 + b"\r\n", 1001, 5000) == "ok"


def test_unstuffing_removes_one_dot_per_line() -> None:
    assert unstuff(b"..a\r\n.\r\nb.\r\n...c\r\n") == b".a\r\n\r\nb.\r\n..c\r\n"
