"""The garden's replies to a pipelined group (RFC 2920 3.2): the replies to MAIL, RCPT and
RSET may be held while the next command is already in, and go out with the next reply, in
order; a reply is never held while the server would wait for input."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP

from envelopay.mail.garden import GardenServer
from envelopay.mail.garden_auth import new_account
from envelopay.mail.garden_lmtp import HELD_MAX

A = "worker@garden.local"
QUICK = 2.0  # a reply that is held would not come within this: the server waits on us


Wire = tuple[asyncio.StreamReader, asyncio.StreamWriter, GardenServer]


@pytest.fixture
async def wire(tmp_path: Path) -> AsyncIterator[Wire]:
    account, secret = new_account(A, [A])
    async with GardenServer(tmp_path / "mail", [A], accounts=[account]) as garden:
        host, port = garden.endpoint  # type: ignore[misc]
        reader, writer = await asyncio.open_connection(host, port)
        await _lines(reader, 1)  # greeting
        writer.write(b"LHLO me\r\n")
        while not (await asyncio.wait_for(reader.readline(), QUICK)).startswith(b"250 "):
            pass
        plain = base64.b64encode(f"\0{A}\0{secret}".encode())
        writer.write(b"AUTH PLAIN " + plain + b"\r\n")
        assert (await _lines(reader, 1))[0].startswith(b"235")
        yield reader, writer, garden
        writer.close()


async def _lines(reader: asyncio.StreamReader, n: int) -> list[bytes]:
    return [await asyncio.wait_for(reader.readline(), QUICK) for _ in range(n)]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every write aiosmtpd's push makes, in order (the garden's push ends in it)."""
    seen: list[bytes] = []
    original = SMTP.push

    async def push(self: Any, status: Any) -> None:
        seen.append(status if isinstance(status, bytes) else status.encode())
        await original(self, status)

    monkeypatch.setattr(SMTP, "push", push)
    return seen


MAIL = f"MAIL FROM:<{A}>\r\n".encode()
RCPT = f"RCPT TO:<{A}>\r\n".encode()
NOBODY = b"RCPT TO:<nobody@garden.local>\r\n"


async def test_a_pipelined_group_is_answered_in_order_in_one_write(wire: Any, writes: list[bytes]) -> None:
    reader, writer, garden = wire
    writes.clear()
    writer.write(MAIL + NOBODY + RCPT + b"DATA\r\n")
    replies = await _lines(reader, 4)
    assert [r[:3] for r in replies] == [b"250", b"550", b"250", b"354"]
    assert len(writes) == 1, writes  # four replies, one write
    writer.write(f"From: {A}\r\nSubject: x\r\n\r\nhello\r\n.\r\n".encode())
    assert (await _lines(reader, 1))[0].startswith(b"250")
    assert len(list((garden.maildir(A) / "new").iterdir())) == 1


async def test_a_client_that_waits_is_answered_at_once(wire: Any, writes: list[bytes]) -> None:
    reader, writer, _ = wire
    for line, code in ((MAIL, b"250"), (NOBODY, b"550"), (RCPT, b"250"), (b"RSET\r\n", b"250")):
        writer.write(line)
        assert (await _lines(reader, 1))[0][:3] == code


async def test_a_group_that_stops_short_of_data_is_answered_without_more_input(wire: Any) -> None:
    reader, writer, _ = wire
    writer.write(MAIL + RCPT)  # and then nothing: the RCPT reply must not wait for a command
    assert [r[:3] for r in await _lines(reader, 2)] == [b"250", b"250"]
    writer.write(RCPT[:10])  # half a command in: nothing held meanwhile either
    await asyncio.sleep(0.05)
    writer.write(RCPT[10:])
    assert (await _lines(reader, 1))[0][:3] == b"250"


async def test_a_group_ending_in_quit_gets_every_reply_before_the_close(wire: Any) -> None:
    reader, writer, _ = wire
    writer.write(b"RSET\r\n" + MAIL + RCPT + b"QUIT\r\n")
    assert [r[:3] for r in await _lines(reader, 4)] == [b"250", b"250", b"250", b"221"]
    assert await asyncio.wait_for(reader.read(), QUICK) == b""


async def test_a_group_without_end_is_answered_in_bounded_writes(wire: Any, writes: list[bytes]) -> None:
    # A client that pipelines and never reads must meet the writes' backpressure, not
    # make the garden hold its replies without bound.
    reader, writer, _ = wire
    writes.clear()
    n = 3 * HELD_MAX + 5
    writer.write(b"RSET\r\n" * n)
    replies = await _lines(reader, n)
    assert all(r.startswith(b"250") for r in replies)
    assert len(writes) >= n // HELD_MAX
    assert max(w.count(b"\r\n") + 1 for w in writes) <= HELD_MAX + 1
