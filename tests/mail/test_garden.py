"""The walled garden: a real aiosmtpd LMTP server, real Maildirs, inotify and poll pickup."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from envelopay import dkim
from envelopay.errors import ConfigError, TransportError, UsageError
from envelopay.mail.garden import GardenServer, LmtpClient, deliver, peer_allowed
from envelopay.mail.line_ends import read_message
from envelopay.mail.maildir import Pickup, deliver_file, ensure_maildir, mailbox_path
from envelopay.protocol import Outbound, Pay, compose, parse

A, B, OUTSIDER = "worker@garden.local", "loc@garden.local", "someone@garden.local"
RAW = (
    b"From: envoy@garden.local\r\nTo: worker@garden.local\r\nSubject: WHICH\r\n\r\n"
    b".dot first\r\n..two\r\nend\r\n"
)


@pytest.fixture
async def garden(tmp_path: Path) -> AsyncIterator[GardenServer]:
    async with GardenServer(tmp_path / "mail", [A, B], open_garden=True) as g:
        yield g


def new_files(maildir: Path) -> list[Path]:
    return sorted((maildir / "new").iterdir())


async def test_delivers_to_each_accepted_recipient_and_refuses_outsiders(garden: GardenServer) -> None:
    result = await deliver(RAW, "envoy@garden.local", [A, OUTSIDER, B], garden.endpoint)
    assert result.delivered == (A, B)
    assert result.refused == (OUTSIDER,)
    assert result.replies[OUTSIDER].code == 550
    for rcpt in (A, B):
        [path] = new_files(garden.maildir(rcpt))
        assert read_message(path) == (
            f"Return-Path: <envoy@garden.local>\r\nDelivered-To: {rcpt}\r\n".encode() + RAW
        )
        assert list((garden.maildir(rcpt) / "tmp").iterdir()) == []
    assert not mailbox_path(garden.root, OUTSIDER).exists()
    assert garden.stats.delivered == 2 and garden.stats.refused_rcpts == 1


async def test_one_reply_per_recipient_on_the_wire(garden: GardenServer) -> None:
    """Speak LMTP by hand so the check does not depend on our own client."""
    host, port = garden.endpoint  # type: ignore[misc]
    reader, writer = await asyncio.open_connection(host, port)

    async def reply() -> bytes:
        lines = []
        while True:
            line = await asyncio.wait_for(reader.readline(), 20)
            lines.append(line)
            if line[3:4] == b" ":
                return b"".join(lines)

    assert (await reply()).startswith(b"220")
    for cmd in (
        b"LHLO me",
        b"MAIL FROM:<envoy@garden.local>",
        f"RCPT TO:<{A}>".encode(),
        f"RCPT TO:<{OUTSIDER}>".encode(),
        f"RCPT TO:<{B}>".encode(),
        b"DATA",
    ):
        writer.write(cmd + b"\r\n")
        answer = await reply()
        if cmd.startswith(b"RCPT") and OUTSIDER.encode() in cmd:
            assert answer.startswith(b"550")
        elif cmd == b"DATA":
            assert answer.startswith(b"354")
        else:
            assert answer.startswith(b"250")
    writer.write(b"Subject: x\r\n\r\nbody\r\n.\r\n")
    first, second = await reply(), await reply()
    assert first.startswith(b"250 ") and A.encode() in first
    assert second.startswith(b"250 ") and B.encode() in second
    writer.write(b"NOOP\r\n")
    assert (await reply()).startswith(b"250")  # no third DATA reply was waiting in the stream
    writer.close()
    await writer.wait_closed()


async def test_unix_socket_garden(tmp_path: Path) -> None:
    sock = tmp_path / "garden.sock"
    async with GardenServer(tmp_path / "mail", [A], unix_path=sock, open_garden=True) as g:
        assert oct(os.stat(sock).st_mode & 0o777) == "0o600"
        result = await deliver(RAW, "", [A], sock)
        assert result.delivered == (A,)
        [path] = new_files(g.maildir(A))
        assert read_message(path).startswith(b"Return-Path: <>\r\n")
    assert not sock.exists()


async def test_refused_peer_gets_421_and_nothing_else(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A], peer_filter=lambda peer: False, open_garden=True) as g:
        with pytest.raises(TransportError, match="421"):
            await deliver(RAW, "envoy@garden.local", [A], g.endpoint)
        assert g.stats.refused_peers == 1
        assert new_files(g.maildir(A)) == []


def test_peer_filter_allows_only_loopback_and_unix() -> None:
    assert peer_allowed(("127.0.0.1", 5000)) and peer_allowed(("::1", 5000, 0, 0))
    assert peer_allowed(("::ffff:127.0.0.1", 5000, 0, 0))
    assert peer_allowed("") and peer_allowed(None)
    for peer in (
        ("192.0.2.2", 5000),
        ("10.0.0.1", 25),
        ("fd00::2", 25, 0, 0),
        ("::ffff:192.0.2.2", 1, 0, 0),
        ("garbage", 1),
        42,
    ):
        assert not peer_allowed(peer)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.2", "::", "example.com"])
def test_garden_refuses_to_listen_beyond_loopback(tmp_path: Path, host: str) -> None:
    with pytest.raises(ConfigError):
        GardenServer(tmp_path, [A], host=host, open_garden=True)


def test_garden_addresses_are_validated(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        GardenServer(tmp_path, ["a@garden.local, b@garden.local"], open_garden=True)
    with pytest.raises(ConfigError):
        GardenServer(tmp_path, [], open_garden=True)


async def test_client_refuses_bad_addresses_before_io(garden: GardenServer) -> None:
    for rcpts in (["a@garden.local\r\nRCPT TO:<x@y.z>"], ["a@garden.local,b@garden.local"], []):
        with pytest.raises(UsageError):
            await deliver(RAW, "envoy@garden.local", rcpts, garden.endpoint)
    with pytest.raises(UsageError):
        await deliver(RAW, "envoy@garden.local>\r\nDATA", [A], garden.endpoint)
    assert garden.stats.connections == 0


async def test_all_recipients_refused_sends_no_data(garden: GardenServer) -> None:
    result = await deliver(RAW, "envoy@garden.local", [OUTSIDER], garden.endpoint)
    assert result.delivered == () and result.replies[OUTSIDER].code == 550
    assert garden.stats.delivered == 0


async def test_oversized_message_is_refused_per_recipient_and_not_stored(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A, B], data_size_limit=1000, open_garden=True) as g:
        big = b"Subject: big\r\n\r\n" + (b"x" * 70 + b"\r\n") * 40
        async with LmtpClient(g.endpoint) as client:
            result = await client.send(big, "envoy@garden.local", [A, B])
            assert result.delivered == () and {r.code for r in result.replies.values()} == {552}
            # the connection is still in step: the next transaction works
            assert (await client.send(RAW, "envoy@garden.local", [A])).delivered == (A,)
        huge = b"Subject: huge\r\n\r\n" + (b"x" * 70 + b"\r\n") * 1100  # beyond aiosmtpd's own cap
        result = await deliver(huge, "envoy@garden.local", [A, B], g.endpoint)
        assert result.delivered == () and result.replies[B].code == 552
        assert len(new_files(g.maildir(A))) == 1 and new_files(g.maildir(B)) == []


async def test_unreachable_garden_is_a_transport_error(tmp_path: Path) -> None:
    with pytest.raises(TransportError):
        await deliver(RAW, "envoy@garden.local", [A], tmp_path / "no-such.sock")


@pytest.mark.parametrize("use_inotify", [True, False])
async def test_pickup_yields_each_delivery_once_and_done_moves_it(
    garden: GardenServer, use_inotify: bool
) -> None:
    box = garden.maildir(A)
    async with Pickup([box], use_inotify=use_inotify) as pickup:
        assert pickup.mode == ("inotify" if use_inotify else "poll")
        async with LmtpClient(garden.endpoint) as client:
            for i in range(20):
                await client.send(RAW.replace(b"WHICH", f"WHICH | {i}".encode()), "envoy@garden.local", [A])
        seen = []
        for _ in range(20):
            d = await pickup.next(timeout=20)
            seen.append(d.raw.split(b"Subject: ")[1].split(b"\r\n")[0])
            target = pickup.done(d, flags="S")
            assert target.parent == box / "cur" and target.name.endswith(":2,S")
        assert sorted(seen) == sorted(f"WHICH | {i}".encode() for i in range(20))
        with pytest.raises(TimeoutError):
            await pickup.next(timeout=0.3)  # nothing is yielded twice
    assert new_files(box) == [] and len(list((box / "cur").iterdir())) == 20


async def test_unprocessed_messages_survive_a_restart(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "box")
    deliver_file(box, b"Subject: one\r\n\r\n1\r\n")
    deliver_file(box, b"Subject: two\r\n\r\n2\r\n")
    async with Pickup([box]) as first:
        d1 = await first.next(timeout=10)
        await first.next(timeout=10)
        first.done(d1)
        # the consumer "crashes" before finishing the second one
    async with Pickup([box]) as again:
        left = await again.next(timeout=10)
        assert left.raw != d1.raw
        with pytest.raises(TimeoutError):
            await again.next(timeout=0.3)


async def test_concurrent_clients_lose_nothing(garden: GardenServer) -> None:
    async def one_client(n: int) -> None:
        async with LmtpClient(garden.endpoint) as client:
            for i in range(25):
                result = await client.send(
                    f"Subject: c{n} m{i}\r\n\r\nx\r\n".encode(), "e@garden.local", [A, B]
                )
                assert result.delivered == (A, B)

    async with Pickup([garden.maildir(A), garden.maildir(B)]) as pickup:
        await asyncio.gather(*(one_client(n) for n in range(4)))
        got = [await pickup.next(timeout=20) for _ in range(200)]
    subjects = {(d.maildir.name, d.raw.split(b"Subject: ")[1].split(b"\r\n")[0]) for d in got}
    assert len(subjects) == 200


async def test_signed_protocol_message_arrives_verifiable_and_parseable(garden: GardenServer) -> None:
    key = dkim.DkimKey.generate_ed25519()
    out = Outbound(
        sender="envoy@garden.local",
        recipient=A,
        message=Pay(id="p-1", amount="1000000", token="USDC", chain="base", proof={"tx": "0x" + "ab" * 32}),
        message_id="<p-1@garden.local>",
        date=datetime(2026, 11, 30, 12, 0, tzinfo=UTC),
    )
    signed = dkim.sign(compose(out), selector="g1", domain="garden.local", key=key)
    async with Pickup([garden.maildir(A)]) as pickup:
        await deliver(signed, out.sender, [A], garden.endpoint)
        d = await pickup.next(timeout=20)
    verdict = await dkim.verify(
        d.raw, dns=dkim.table_dns({"g1._domainkey.garden.local": key.dns_txt_record()})
    )
    assert verdict.status == "pass" and verdict.aligned
    parsed = parse(d.raw)
    assert parsed.valid and parsed.type is not None and parsed.type.value.upper() == "PAY"
    assert parsed.message_id == "<p-1@garden.local>"


async def test_malformed_mail_is_stored_byte_exact_and_parses_to_a_value(garden: GardenServer) -> None:
    garbage = (
        b'Subject: PAY\r\nContent-Type: multipart/mixed; boundary="nope\r\n'
        b'\r\n--nope\r\nContent-Type: application/json\r\n\r\n{"v": \xff\xfe broken\r\n'
    )
    async with Pickup([garden.maildir(A)]) as pickup:
        result = await deliver(garbage, "envoy@garden.local", [A], garden.endpoint)
        assert result.delivered == (A,)
        d = await pickup.next(timeout=20)
    assert d.raw.endswith(garbage)
    parsed = parse(d.raw)
    assert parsed.protocol and not parsed.valid and parsed.oops is not None
