"""LMTP interop: our client against Dovecot's LMTP server, stdlib smtplib.LMTP against our server.

Each side of RFC 2033 is checked against an implementation we did not write."""

from __future__ import annotations

import asyncio
import smtplib
from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopay.mail.garden import GardenServer, LmtpClient
from envelopay.mail.line_ends import read_message
from envelopay.testing.dovecot import Dovecot, running_dovecot

RAW = (
    b"From: envoy@garden.local\r\nSubject: WHICH\r\nMessage-ID: <i1@garden.local>\r\n\r\n"
    b".dot line\r\nbody\r\n"
)
ALICE, BOB, NOBODY = "alice@example.test", "bob@example.test", "nosuchuser@example.test"


@pytest.fixture
def dovecot() -> Iterator[Dovecot]:
    with running_dovecot() as server:
        yield server


def maildir_messages(box: Path) -> list[bytes]:
    return [
        read_message(p)
        for sub in ("new", "cur")
        if (box / sub).exists()
        for p in sorted((box / sub).iterdir())
    ]


async def test_our_client_gets_one_reply_per_recipient_from_dovecot(dovecot: Dovecot) -> None:
    async with LmtpClient((dovecot.host, dovecot.lmtp_port), name="garden.test") as client:
        result = await client.send(RAW, "envoy@garden.local", [ALICE, NOBODY, BOB])
        # a second transaction on the same connection stays in step
        again = await client.send(RAW.replace(b"i1@", b"i2@"), "envoy@garden.local", [BOB])
    assert result.delivered == (ALICE, BOB)
    assert result.refused == (NOBODY,) and 500 <= result.replies[NOBODY].code < 600
    assert again.delivered == (BOB,)
    for user, count in (("alice", 1), ("bob", 2)):
        got = maildir_messages(dovecot.maildir(user))
        assert len(got) == count
        assert b"\r\n.dot line\r\nbody" in got[0].replace(b"\n", b"\r\n").replace(b"\r\r\n", b"\r\n")


async def test_stdlib_lmtp_client_against_our_garden(tmp_path: Path) -> None:
    addresses = ["a@garden.local", "b@garden.local"]
    async with GardenServer(tmp_path / "mail", addresses, open_garden=True) as garden:
        host, port = garden.endpoint  # type: ignore[misc]

        def send() -> dict[str, tuple[int, bytes]]:
            with smtplib.LMTP(host, port, timeout=30) as lmtp:
                refused = lmtp.sendmail("envoy@garden.local", ["a@garden.local"], RAW)
                with pytest.raises(smtplib.SMTPRecipientsRefused):
                    lmtp.sendmail("envoy@garden.local", ["x@garden.local"], RAW)
                return refused

        assert await asyncio.to_thread(send) == {}
        [path] = (garden.maildir("a@garden.local") / "new").iterdir()
        assert read_message(path).endswith(RAW)
