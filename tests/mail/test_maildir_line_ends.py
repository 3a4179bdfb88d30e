"""Maildir files hold LF line ends (as Dovecot and mutt expect), and every reader gets the
bytes as received back, CRLF: DKIM verifies after a store/read round trip and after the
garden's LMTP delivery and pickup. A message with a bare LF is stored as received."""

from __future__ import annotations

import mailbox
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from envelopay import dkim
from envelopay.mail.garden import GardenServer, deliver
from envelopay.mail.line_ends import from_disk, read_message, to_disk
from envelopay.mail.mailbox import Mailbox
from envelopay.mail.maildir import Pickup, deliver_file, ensure_maildir

A, B = "a@garden.test", "b@garden.test"
KEY = dkim.DkimKey.generate_ed25519()
DNS = dkim.table_dns({"s._domainkey.garden.test": KEY.dns_txt_record()})
PLAIN = (f"From: {A}\r\nTo: {B}\r\nSubject: line ends\r\nDate: Mon, 30 Nov 2026 12:00:00 +0000\r\n"
         "Message-ID: <le.1@garden.test>\r\n\r\nfirst line\r\n\r\n  indented, trailing space \r\n").encode()


def _signed() -> bytes:
    return dkim.sign(PLAIN, selector="s", domain="garden.test", key=KEY)


def _stored(box: Path) -> Path:
    [path] = list((box / "new").iterdir())
    return path


async def test_a_crlf_message_is_stored_lf_and_read_back_exactly(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / B)
    raw = _signed()
    path = deliver_file(box, raw)
    stored = path.read_bytes()
    assert b"\r" not in stored and stored.count(b"\n") == raw.count(b"\r\n")
    assert path.name.endswith(f",W={len(raw)}")  # Dovecot's size with CRLF line ends
    assert read_message(path) == raw
    assert (await dkim.verify(read_message(path), dns=DNS)).status == "pass"


def test_a_mail_reader_sees_no_carriage_returns(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / B)
    deliver_file(box, _signed())
    [msg] = list(mailbox.Maildir(box, create=False))  # how mutt and Dovecot read the file
    assert msg["Subject"] == "line ends"
    assert all("\r" not in value for value in msg.values())
    payload = msg.get_payload()
    assert isinstance(payload, str) and "\r" not in payload and "trailing space \n" in payload


async def test_a_bare_lf_keeps_the_file_exact(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / B)
    odd = b"Subject: odd\r\n\r\none\ntwo\r\n"  # a bare LF: LF on disk could not be told apart
    path = deliver_file(box, odd)
    assert path.read_bytes() == odd and ",W=" not in path.name
    assert read_message(path) == odd
    async with Pickup([box], use_inotify=False, poll_interval=0.005) as pickup:
        assert (await pickup.next(timeout=10)).raw == odd


@given(st.binary(max_size=200))
def test_to_disk_and_back_is_exact_for_any_bytes(raw: bytes) -> None:
    stored, suffix = to_disk(raw)
    assert from_disk(f"1.M2P3Q4R5.host{suffix}:2,S", stored) == raw
    assert (b"\r\n" not in stored) or suffix == ""


async def test_garden_delivery_then_pickup_gives_the_signed_bytes(tmp_path: Path) -> None:
    raw = _signed()
    async with GardenServer(tmp_path / "mail", [A, B], open_garden=True) as garden:
        result = await deliver(raw, A, [B], garden.endpoint)
        assert result.delivered == (B,)
        box = garden.maildir(B)
        stored = _stored(box).read_bytes()
        assert b"\r" not in stored
        async with Pickup([box], use_inotify=False, poll_interval=0.005) as pickup:
            got = await pickup.next(timeout=10)
            assert got.raw.endswith(raw) and b"\n" not in got.raw.replace(b"\r\n", b"")
            assert (await dkim.verify(got.raw, dns=DNS)).status == "pass"
            moved = pickup.done(got, "S")
    assert moved is not None and read_message(moved) == got.raw  # the flags keep ,W=


def test_the_agent_mailbox_gives_back_the_bytes_as_received(tmp_path: Path) -> None:
    raw = _signed()
    box = Mailbox(tmp_path / "agent", address=B)
    try:
        deliver_file(box.root / "inbox", raw)
        [rec] = box.refresh()
        assert box.raw(rec.id) == raw
        assert "trailing space" in box.get(rec.id).body
    finally:
        box.close()
