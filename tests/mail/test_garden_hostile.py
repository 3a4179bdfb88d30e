"""Issue 29 against the garden, items 6 and 7: what a hostile local process can do to the
LMTP server — hold its connection slots without logging in, and feed it non-ASCII
where an address goes. A real aiosmtpd garden on loopback, raw sockets speaking LMTP."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from envelopay.mail.garden import GardenServer
from envelopay.mail.garden_auth import new_account

A = "worker@garden.local"


class Wire:
    """One LMTP connection spoken by hand: a line out, one (possibly multi-line) reply in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, garden: GardenServer) -> Wire:
        host, port = garden.endpoint  # type: ignore[misc]
        wire = cls(*await asyncio.open_connection(host, port))
        await wire.reply()  # the greeting (or a 421)
        return wire

    async def reply(self) -> list[bytes]:
        lines: list[bytes] = []
        while True:
            line = await asyncio.wait_for(self.reader.readline(), 20)
            if not line:
                return lines
            lines.append(line)
            if line[3:4] != b"-":
                return lines

    async def say(self, line: bytes) -> bytes:
        self.writer.write(line + b"\r\n")
        await self.writer.drain()
        got = await self.reply()
        return got[-1] if got else b""

    async def closed_by_server(self, line: bytes, most: int) -> bool:
        """Send `line` up to `most` times, pausing between: did the server hang up?"""
        for _ in range(most):
            try:
                self.writer.write(line + b"\r\n")
                await self.writer.drain()
                got = await self.reply()
            except (ConnectionError, asyncio.IncompleteReadError):
                return True
            if not got or got[-1].startswith(b"421"):
                return True
            await asyncio.sleep(0.02)
        return False

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def garden(tmp_path: Path) -> AsyncIterator[tuple[GardenServer, str]]:
    account, secret = new_account(A, [A])
    async with GardenServer(tmp_path / "mail", [A], accounts=[account]) as g:
        yield g, secret


def _plain(secret: str) -> bytes:
    return b"AUTH PLAIN " + base64.b64encode(f"\0{A}\0{secret}".encode())


async def _logged_in(garden: GardenServer, secret: str) -> Wire:
    wire = await Wire.open(garden)
    assert (await wire.say(b"LHLO me")).startswith(b"250 ")
    assert (await wire.say(_plain(secret))).startswith(b"235")
    return wire


def _stored(garden: GardenServer) -> list[Path]:
    return sorted((garden.maildir(A) / "new").iterdir())


def _no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert bad == [], [r.getMessage() for r in bad]


# ----------------------------------------------------------------- item 7: non-ASCII


HEADER_FROMS = [
    pytest.param("worker\u200b@garden.local".encode(), id="zero-width-space"),
    pytest.param("wörker@garden.local".encode(), id="latin"),
    pytest.param(b"worker\xff@garden.local", id="invalid-utf8"),
    pytest.param(b"worker\xed\xa0\x80@garden.local", id="lone-surrogate"),
    pytest.param("Wörker \u202e <worker\u200b@garden.local>".encode(), id="display-name-and-bidi"),
    pytest.param(b"worker@garden.local\r\n\tx\xc3\xa9@garden.local", id="folded-second-address"),
]


@pytest.mark.parametrize("frm", HEADER_FROMS)
async def test_a_non_ascii_header_from_is_a_clean_550(
    garden: tuple[GardenServer, str], caplog: pytest.LogCaptureFixture, frm: bytes
) -> None:
    g, secret = garden
    caplog.set_level(logging.INFO)
    wire = await _logged_in(g, secret)
    assert (await wire.say(f"MAIL FROM:<{A}>".encode())).startswith(b"250")
    assert (await wire.say(f"RCPT TO:<{A}>".encode())).startswith(b"250")
    assert (await wire.say(b"DATA")).startswith(b"354")
    answer = await wire.say(b"From: " + frm + f"\r\nTo: {A}\r\nSubject: x\r\n\r\nhi\r\n.".encode())
    assert answer.startswith(b"550 5.7.1 ") or answer.startswith(b"550 5.6.0 "), answer
    assert answer.isascii() and b"Error" not in answer
    # The connection goes on: the same sender's honest mail is delivered after it.
    assert (await wire.say(f"MAIL FROM:<{A}>".encode())).startswith(b"250")
    assert (await wire.say(f"RCPT TO:<{A}>".encode())).startswith(b"250")
    assert (await wire.say(b"DATA")).startswith(b"354")
    ok = await wire.say(f"From: {A}\r\nTo: {A}\r\nSubject: y\r\n\r\nhi\r\n.".encode())
    assert ok.startswith(b"250 2.0.0"), ok
    wire.close()
    assert len(_stored(g)) == 1 and b"Subject: y" in _stored(g)[0].read_bytes()
    _no_tracebacks(caplog)


ENVELOPES = [
    pytest.param(b"MAIL FROM:<worker\xe2\x80\x8b@garden.local>", id="mail-zwsp"),
    pytest.param(b"MAIL FROM:<worker\xe2\x80\x8b@garden.local> SMTPUTF8", id="mail-zwsp-smtputf8"),
    pytest.param(b"MAIL FROM:<worker\xff@garden.local>", id="mail-invalid-utf8"),
    pytest.param(b"MAIL FROM:<worker\xed\xa0\x80@garden.local>", id="mail-lone-surrogate"),
    pytest.param(b"MAIL FROM:<worker@garden.local> SMTPUTF8", id="mail-smtputf8-not-offered"),
]


@pytest.mark.parametrize("line", ENVELOPES)
async def test_non_ascii_in_mail_from_is_a_clean_5xx(
    garden: tuple[GardenServer, str], caplog: pytest.LogCaptureFixture, line: bytes
) -> None:
    g, secret = garden
    caplog.set_level(logging.INFO)
    wire = await _logged_in(g, secret)
    answer = await wire.say(line)
    assert answer[:1] == b"5" and answer[3:4] == b" " and answer.isascii(), answer
    assert b"Error: (" not in answer
    assert (await wire.say(f"RCPT TO:<{A}>".encode())).startswith(b"503")  # no transaction began
    wire.close()
    assert _stored(g) == []
    _no_tracebacks(caplog)


@pytest.mark.parametrize("rcpt", [
    pytest.param(b"worker\xe2\x80\x8b@garden.local", id="zwsp"),
    pytest.param(b"worker\xff@garden.local", id="invalid-utf8"),
    pytest.param("wörker@garden.local".encode(), id="latin"),
])
async def test_non_ascii_in_rcpt_to_is_a_clean_5xx(
    garden: tuple[GardenServer, str], caplog: pytest.LogCaptureFixture, rcpt: bytes
) -> None:
    g, secret = garden
    caplog.set_level(logging.INFO)
    wire = await _logged_in(g, secret)
    assert (await wire.say(f"MAIL FROM:<{A}>".encode())).startswith(b"250")
    answer = await wire.say(b"RCPT TO:<" + rcpt + b">")
    assert answer.startswith(b"501 5.6.7 ") and answer.isascii(), answer
    assert (await wire.say(b"DATA")).startswith(b"503")  # no recipient was taken
    wire.close()
    assert _stored(g) == []
    _no_tracebacks(caplog)


def test_a_reply_quotes_an_address_as_printable_ascii() -> None:
    from envelopay.mail.garden import shown

    assert shown("a\u200bb@x") == "a\\u200bb@x"
    assert shown("a\r\n550 fake@x") == "a\\r\\n550 fake@x"  # no second reply line smuggled in
    assert shown("a\udcff@x") == "a\\udcff@x"
    assert shown(A) == A
