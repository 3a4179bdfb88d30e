"""Issue 29 against the garden, items 6 and 7: what a hostile local process can do to the
LMTP server — hold its connection slots without logging in, and feed it non-ASCII
where an address goes. A real aiosmtpd garden on loopback, raw sockets speaking LMTP."""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from envelopay.mail.garden import GardenServer, deliver
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


# ------------------------------------------------------------- item 6: connection slots


def _mail(subject: str) -> bytes:
    return f"From: {A}\r\nTo: {A}\r\nSubject: {subject}\r\n\r\nhi\r\n".encode()


async def test_idle_connections_that_never_log_in_do_not_keep_an_agent_out(tmp_path: Path) -> None:
    """Forty connections that LHLO, NOOP and never AUTH (long deadlines, so only the
    separate budget can help): the agent connecting after them still delivers."""
    account, secret = new_account(A, [A])
    async with GardenServer(tmp_path / "mail", [A], accounts=[account], max_connections=2,
                            max_unauthenticated=4, login_timeout=60, idle_timeout=60) as g:
        squatters = [await Wire.open(g) for _ in range(40)]
        for wire in squatters[-4:]:  # the newest four are still open: they chatter
            assert (await wire.say(b"LHLO squat")).startswith(b"250 ")
            assert (await wire.say(b"NOOP")).startswith(b"250")
        assert g.unauthenticated == 4 and g.stats.evicted == 36
        # An evicted connection was told why before it was closed.
        assert await asyncio.wait_for(squatters[0].reader.read(), 20) == (
            b"421 4.7.0 too many connections not logged in, closing the oldest\r\n")
        done = await deliver(_mail("through"), A, [A], g.endpoint, auth=(A, secret))
        assert done.delivered == (A,)
        assert g.stats.refused_busy == 0
        for wire in squatters:
            wire.close()
    assert len(_stored(g)) == 1


@pytest.mark.parametrize("chatter", [b"NOOP", b"RSET", b"HELP", b"VRFY x@garden.local", b"LHLO again"])
async def test_chatter_before_login_does_not_extend_the_login_deadline(
    tmp_path: Path, chatter: bytes
) -> None:
    account, _ = new_account(A, [A])
    async with GardenServer(tmp_path / "mail", [A], accounts=[account], login_timeout=0.3,
                            idle_timeout=60) as g:
        wire = await Wire.open(g)
        assert (await wire.say(b"LHLO me")).startswith(b"250 ")
        # Bounded: 500 rounds are far past the deadline; the garden must hang up first.
        assert await wire.closed_by_server(chatter, most=500)
        wire.close()
        await _until(lambda: g.unauthenticated == 0)


async def test_chatter_after_login_does_not_extend_the_idle_deadline(tmp_path: Path) -> None:
    account, secret = new_account(A, [A])
    async with GardenServer(tmp_path / "short", [A], accounts=[account], login_timeout=60,
                            idle_timeout=0.3) as g:
        wire = await _logged_in(g, secret)
        assert g.active == 1 and g.unauthenticated == 0
        assert await wire.closed_by_server(b"NOOP", most=500)
        wire.close()
        await _until(lambda: g.active == 0)


async def test_a_login_past_the_cap_gets_421_and_the_slot_comes_back(tmp_path: Path) -> None:
    account, secret = new_account(A, [A])
    async with GardenServer(tmp_path / "mail", [A], accounts=[account], max_connections=1) as g:
        first = await _logged_in(g, secret)
        second = await Wire.open(g)  # connecting is fine: not logged in yet
        assert (await second.say(b"LHLO me")).startswith(b"250 ")
        assert (await second.say(_plain(secret))).startswith(b"421 4.7.0 too many connections")
        assert await second.reader.read() == b""  # and closed
        assert g.stats.refused_busy == 1
        first.close()
        await _until(lambda: g.active == 0)
        assert (await deliver(_mail("later"), A, [A], g.endpoint, auth=(A, secret))).delivered == (A,)


async def _until(condition: Callable[[], bool], rounds: int = 1000) -> None:
    """Wait (bounded) for a condition the event loop makes true; fail if it never does."""
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("flag", [
    ["--login-timeout", "0"], ["--login-timeout", "nan"], ["--login-timeout", "inf"],
    ["--idle-timeout", "-1"], ["--max-unauthenticated", "0"], ["--max-connections", "0"],
])
def test_garden_serve_refuses_limits_that_are_none(tmp_path: Path, flag: list[str]) -> None:
    """The limits are garden serve's flags: a bad one is bad input (exit 2), nothing listens."""
    from typer.testing import CliRunner

    from envelopay.cli.app import app

    (tmp_path / "accounts.json").write_text("[]")
    res = CliRunner().invoke(app, ["garden", "serve", "--root", str(tmp_path / "mail"), "-a", A,
                                   "--port", "0", "--accounts", str(tmp_path / "accounts.json"), *flag])
    assert res.exit_code == 2, res.output
    assert "login_timeout" in res.output or "max_" in res.output
