"""The pooled SMTP connection reads the server's bytes itself (mail/transport/smtp_pipe.py), so
those bytes are outside input: fuzz the reply reader, then the whole delivery against a
hostile server. A reply that is not SMTP ends in a TransportError (or a clean fallback),
never another exception, a hang, or a broken connection back in the pool."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

import pytest

from envelopay.errors import TransportError
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.smtp_pipe import _Replies
from envelopay.mail.transport.submission import SmtpTransport

SEED = 20261201


def _valid(rng: random.Random) -> tuple[bytes, tuple[int, str]]:
    code = rng.choice([250, 251, 354, 421, 450, 452, 550, 553, 554])
    lines = [f"line {i} {rng.randrange(10**6)}" for i in range(rng.randint(1, 4))]
    ends = [rng.choice([b"\r\n", b"\n"]) for _ in lines]
    wire = b"".join(
        f"{code}{'-' if i < len(lines) - 1 else ' '}{text}".encode() + ends[i]
        for i, text in enumerate(lines)
    )
    return wire, (code, "\n".join(lines))


def _chunks(rng: random.Random, data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        n = rng.randint(1, 9)
        out.append(data[i : i + n])
        i += n
    return out


def test_valid_replies_in_any_chunking_parse_exactly() -> None:
    rng = random.Random(SEED)
    for _ in range(2_000):
        replies = [_valid(rng) for _ in range(rng.randint(1, 4))]
        proto = _Replies()
        for chunk in _chunks(rng, b"".join(w for w, _ in replies)):
            proto.data_received(chunk)
        got = []
        while (r := proto._take()) is not None:
            got.append(r)
        assert got == [want for _, want in replies]
        assert not proto.buffer


def test_hostile_bytes_give_a_reply_none_or_connection_error() -> None:
    rng = random.Random(SEED + 1)
    pieces = [b"250", b"-", b" ", b"\r\n", b"\n", b"\r", b"\x00", b"\xff\xfe", b"25", b"abc",
              b"2500 ok\r\n", b"ok\r\n", "é".encode(), b"9" * 5000, b"-" * 300]
    for _ in range(5_000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        if rng.random() < 0.3:
            data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        proto = _Replies()
        proto.data_received(data)
        try:
            while (r := proto._take()) is not None:
                code, text = r
                assert 0 <= code <= 999 and isinstance(text, str)
        except ConnectionError:
            pass  # the deliverer closes the connection and falls back (OSError)


def test_an_endless_reply_is_refused_not_buffered_forever() -> None:
    proto = _Replies()
    proto.data_received(b"250-" + b"x" * 70_000)
    with pytest.raises(ConnectionError, match="too long"):
        proto._take()


_BEHAVIOURS = ("garbage", "close", "silent", "endless", "refuse_then_garbage", "half_reply")


@contextlib.asynccontextmanager
async def _hostile_server(behaviour: str, rng: random.Random) -> AsyncIterator[int]:
    """Greets and answers EHLO (with PIPELINING) properly, then misbehaves."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write(b"220 hostile.test ESMTP\r\n")
            line = await reader.readline()
            if line.upper().startswith(b"EHLO"):
                writer.write(b"250-hostile.test\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
            else:
                writer.write(b"250 hostile.test\r\n")
            await writer.drain()
            await reader.readline()  # MAIL FROM (and what follows it, pipelined)
            if behaviour == "garbage":
                writer.write(bytes(rng.randrange(256) for _ in range(40)) + b"\r\n")
            elif behaviour == "close":
                writer.close()
                return
            elif behaviour == "silent":
                await asyncio.sleep(5)
            elif behaviour == "endless":
                writer.write(b"250-" + b"y" * 80_000)
            elif behaviour == "refuse_then_garbage":
                writer.write(b"250 ok\r\n\x00\x01\x02 not smtp\r\n")
            elif behaviour == "half_reply":
                writer.write(b"25")
                await writer.drain()
                writer.close()
                return
            await writer.drain()
            await asyncio.sleep(5)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(server.wait_closed(), 1)


@pytest.mark.parametrize("behaviour", _BEHAVIOURS)
async def test_a_hostile_server_ends_in_a_transport_error_with_nothing_pooled(behaviour: str) -> None:
    rng = random.Random(f"{SEED}-{behaviour}")
    async with _hostile_server(behaviour, rng) as port:
        deliverer = SmtpTransport(SmtpConfig("127.0.0.1", port, security="none", timeout=0.5, max_attempts=1))
        for n in range(3):  # later sends find no broken connection waiting in the pool
            with pytest.raises(TransportError):
                await asyncio.wait_for(
                    deliverer.send(b"Subject: x\r\n\r\nbody\r\n", "a@agents.test", f"b{n}@partner.test"),
                    timeout=10,
                )
            assert all(s.usable for s in deliverer._idle)
        await deliverer.close()
