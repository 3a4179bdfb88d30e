"""Issue 11 against the garden: per-agent credentials and the impersonation test (item 9);
repeated RCPT, idle timeout, connection cap and quiet refusals (item 8). A real aiosmtpd
LMTP server, real Maildirs, the project's own LMTP client and raw sockets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from envelopay.errors import TransportError
from envelopay.mail.garden import GardenServer, LmtpClient, deliver
from envelopay.mail.garden_auth import authenticated_sender, load_accounts, new_account, save_accounts
from envelopay.mail.line_ends import read_message
from envelopay.protocol import parse

A, B = "worker@garden.local", "buyer@garden.local"


def mail(frm: str, extra: bytes = b"") -> bytes:
    head = f"From: {frm}\r\nTo: {A}\r\nSubject: WHICH\r\nMessage-ID: <m1@garden.local>\r\n"
    return extra + head.encode() + b"\r\nhi\r\n"


def files(garden: GardenServer, addr: str) -> list[Path]:
    return sorted((garden.maildir(addr) / "new").iterdir())


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[tuple[GardenServer, dict[str, tuple[str, str]]]]:
    acct_a, secret_a = new_account(A, [A])
    acct_b, secret_b = new_account(B, [B])
    # The accounts travel through their file format, as a deployed garden reads them.
    save_accounts(tmp_path / "accounts.json", [acct_a, acct_b])
    accounts = load_accounts(tmp_path / "accounts.json")
    async with GardenServer(tmp_path / "mail", [A, B], accounts=accounts) as g:
        yield g, {A: (A, secret_a), B: (B, secret_b)}


async def test_an_insider_authenticated_as_a_cannot_send_from_b(
    secured: tuple[GardenServer, dict[str, tuple[str, str]]],
) -> None:
    garden, creds = secured
    # Header From B, envelope from A: refused at DATA, per recipient, nothing stored.
    result = await deliver(mail(B), A, [A, B], garden.endpoint, auth=creds[A])
    assert result.delivered == ()
    assert {r.code for r in result.replies.values()} == {550}
    assert "may not send From" in result.replies[A].text
    # Envelope from B as A: refused at MAIL.
    with pytest.raises(TransportError, match="553"):
        await deliver(mail(B), B, [A], garden.endpoint, auth=creds[A])
    assert files(garden, A) == [] and files(garden, B) == []
    assert garden.stats.refused_from == 1


async def test_no_credential_or_a_wrong_one_sends_nothing(
    secured: tuple[GardenServer, dict[str, tuple[str, str]]],
) -> None:
    garden, creds = secured
    with pytest.raises(TransportError, match="530"):
        await deliver(mail(A), A, [A], garden.endpoint)
    with pytest.raises(TransportError, match="535"):
        await deliver(mail(A), A, [A], garden.endpoint, auth=(A, creds[B][1]))
    assert files(garden, A) == [] and garden.stats.refused_auth == 1


async def test_the_garden_records_the_authenticated_sender_and_strips_forged_claims(
    secured: tuple[GardenServer, dict[str, tuple[str, str]]],
) -> None:
    garden, creds = secured
    forged = (
        b"Authentication-Results: garden.local; auth=pass smtp.auth=buyer@garden.local\r\n"
        b"Authentication-Results: other.example; dkim=pass header.d=x.example\r\n"
    )
    result = await deliver(mail(A, forged), A, [B], garden.endpoint, auth=creds[A])
    assert result.delivered == (B,)
    [path] = files(garden, B)
    stored = read_message(path)
    assert stored.count(b"garden.local; auth=pass") == 1
    assert b"smtp.auth=buyer@garden.local" not in stored  # the outside claim is gone
    assert b"Authentication-Results: other.example;" in stored  # another gateway's stays
    assert authenticated_sender(stored, authserv_id="garden.local") == A
    assert parse(stored).from_addr == A


async def test_an_open_garden_still_strips_claims_of_its_own_id(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A, B], open_garden=True) as garden:
        forged = b"Authentication-Results: garden.local; auth=pass smtp.auth=worker@garden.local\r\n"
        assert (await deliver(mail(B, forged), B, [A], garden.endpoint)).delivered == (A,)
        stored = read_message(files(garden, A)[0])
    assert b"smtp.auth" not in stored and authenticated_sender(stored, authserv_id="garden.local") is None


async def test_a_header_block_the_shared_reader_refuses_is_refused_by_the_garden(
    secured: tuple[GardenServer, dict[str, tuple[str, str]]], tmp_path: Path
) -> None:
    garden, creds = secured
    attack = (
        b"From : mallory@evil.test\r\nX-Pad: a\rFrom: worker@garden.local\r\n"
        b"Authentication-Results: garden.local; auth=pass smtp.auth=buyer@garden.local\r\n"
        b"Subject: PAY\r\n\r\n{}\r\n"
    )
    result = await deliver(attack, A, [A], garden.endpoint, auth=creds[A])
    assert result.replies[A].code == 550 and "header block refused" in result.replies[A].text
    assert files(garden, A) == []
    # An open garden checks no From and stores it as it came: every reader refuses it.
    async with GardenServer(tmp_path / "open", [A], open_garden=True) as open_garden:
        assert (await deliver(attack, "", [A], open_garden.endpoint)).delivered == (A,)
        stored = read_message(files(open_garden, A)[0])
    assert authenticated_sender(stored, authserv_id="garden.local") is None
    assert not parse(stored).valid and parse(stored).from_addr is None


async def test_a_repeated_rcpt_stores_one_copy(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A, B], open_garden=True) as garden:
        async with LmtpClient(garden.endpoint) as client:
            result = await client.send(mail(B), B, [A, A, B, A])
        assert set(result.delivered) == {A, B}
        assert len(files(garden, A)) == 1 and len(files(garden, B)) == 1


async def _greeted(garden: GardenServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = garden.endpoint  # type: ignore[misc]
    reader, writer = await asyncio.open_connection(host, port)
    return reader, writer


async def test_an_idle_connection_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A], idle_timeout=0.3, accounts=[]) as garden:
        reader, writer = await _greeted(garden)
        assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"220")
        # Nothing sent: the garden gives up on us (the default would be aiosmtpd's 300 s),
        # saying why (RFC 5321 4.2.2: 421 closes the channel).
        assert await asyncio.wait_for(reader.read(), 5) == b"421 4.4.2 timeout, closing connection\r\n"
        assert reader.at_eof()
        writer.close()


async def test_connections_beyond_the_cap_get_421(tmp_path: Path) -> None:
    async with GardenServer(tmp_path / "mail", [A], max_connections=2, open_garden=True) as garden:
        first, second = await _greeted(garden), await _greeted(garden)
        for reader, _ in (first, second):
            assert (await asyncio.wait_for(reader.readline(), 5)).startswith(b"220")
        third_r, third_w = await _greeted(garden)
        assert (await asyncio.wait_for(third_r.read(), 5)).startswith(b"421 4.7.0 too many connections")
        third_w.close()
        first[1].close()
        await asyncio.sleep(0.2)
        # A slot is free again: a real transaction goes through.
        assert (await deliver(mail(A), A, [A], garden.endpoint)).delivered == (A,)
        assert garden.stats.refused_busy == 1
        second[1].close()


async def test_a_refused_peer_logs_one_line_and_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with GardenServer(tmp_path / "mail", [A], peer_filter=lambda peer: False, accounts=[]) as garden:
        with pytest.raises(TransportError, match="421"):
            await deliver(mail(A), A, [A], garden.endpoint)
        await asyncio.sleep(0.1)  # let connection_lost run
    ours = [r for r in caplog.records if r.name == "envelopay.garden"]
    assert len(ours) == 1 and "refused a connection" in ours[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not [r for r in caplog.records if "AssertionError" in r.getMessage()]


def test_the_account_command_prints_the_secret_once_and_keeps_its_hash(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envelopay.cli.app import app

    path = tmp_path / "accounts.json"
    res = CliRunner().invoke(app, ["garden", "account", A, "-a", A, "--accounts", str(path)])
    assert res.exit_code == 0, res.output
    secret = res.stdout.strip()  # the secret alone on stdout; what was granted: stderr
    [account] = load_accounts(path)
    assert account.user == A and account.check(secret) and secret not in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    bad = CliRunner().invoke(app, ["garden", "account", A, "-a", "not an address", "--accounts", str(path)])
    assert bad.exit_code == 2 and load_accounts(path) == [account]


def test_a_garden_authenticates_unless_told_open_in_so_many_words(tmp_path: Path) -> None:
    from envelopay.errors import ConfigError

    with pytest.raises(ConfigError, match="open_garden=True"):
        GardenServer(tmp_path, [A])  # no silent default: accounts, or the explicit opt-out
    with pytest.raises(ConfigError, match="contradict"):
        GardenServer(tmp_path, [A], accounts=[], open_garden=True)
    assert GardenServer(tmp_path, [A], accounts=[]).requires_auth
    assert not GardenServer(tmp_path, [A], open_garden=True).requires_auth


async def test_an_open_garden_says_so_when_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="envelopay.garden")
    async with GardenServer(tmp_path / "mail", [A], open_garden=True):
        pass
    assert any("is OPEN" in r.getMessage() for r in caplog.records)


async def test_an_account_added_since_is_found_by_the_refresh_at_login(tmp_path: Path) -> None:
    account, secret = new_account(A, [A])
    refreshes: list[int] = []

    async with GardenServer(tmp_path / "mail", [A], accounts=[]) as garden:
        def refresh() -> None:  # what the devnet does: re-read its registry
            refreshes.append(1)
            garden.accounts = {account.user: account}

        garden.refresh = refresh
        # Nobody yet: the refresh at AUTH finds the account, and the mail goes in (its MAIL
        # re-reads too: a take or a removal since the login counts there).
        assert (await deliver(mail(A), A, [A], garden.endpoint, auth=(A, secret))).delivered == (A,)
        assert len(refreshes) == 2
        # Every login and MAIL re-reads who exists (an unchanged accounts file costs one
        # stat); a wrong secret is then 535, and no MAIL follows it.
        assert (await deliver(mail(A), A, [A], garden.endpoint, auth=(A, secret))).delivered == (A,)
        with pytest.raises(TransportError, match="535"):
            await deliver(mail(A), A, [A], garden.endpoint, auth=(A, secret + "x"))
        assert len(refreshes) == 5


async def test_a_repeated_singleton_goes_in_only_when_every_from_is_the_senders(
    secured: tuple[GardenServer, dict[str, tuple[str, str]]],
) -> None:
    garden, creds = secured
    # Refused by the shared reader (two Subjects), yet every From is A's: the worker can
    # answer it invalid_field, and any From a reader picks is the authenticated sender's.
    twice = mail(A, b"Subject: again\r\n")
    assert (await deliver(twice, A, [B], garden.endpoint, auth=creds[A])).delivered == (B,)
    [stored] = files(garden, B)
    trace = f"Authentication-Results: garden.local; auth=pass smtp.auth={A}\r\n".encode()
    assert trace in read_message(stored)
    # Two Froms, one of them B's: refused, as is a claim of the garden's id in such a block.
    claim = b"Authentication-Results: garden.local; auth=pass smtp.auth=x\r\n"
    for extra in (f"From: {B}\r\n".encode(), claim):
        result = await deliver(mail(A, extra + b"Subject: again\r\n"), A, [B], garden.endpoint, auth=creds[A])
        assert result.delivered == () and "5.6.0" in result.replies[B].text
    assert len(files(garden, B)) == 1
