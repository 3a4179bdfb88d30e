"""Numbers read from outside are ASCII digits. Python's str.isdigit() is also true of
'²' (which int() refuses: a ValueError where a refusal was meant) and of '٣' or '١٧'
(which int() reads: another spelling of a number). Each boundary that checked isdigit()
before int() now refuses them as it refuses any other bad number: the AgentMail webhook's
timestamp, an LMTP server's reply code, --smtp's port, a garden endpoint (garden deliver
--endpoint, enforcer serve --garden), the spend limits. (The enforcer API's page limit:
tests/enforcer/test_paging.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.cli.mail_options import smtp_config
from envelopay.enforcer.spend.policy import parse_spend
from envelopay.errors import TransportError, UsageError
from envelopay.mail.agentmail.webhook import sign_delivery, verify_delivery
from envelopay.mail.mailbox import MailboxError
from envelopay.mail.transport.lmtp_client import LmtpClient, parse_endpoint

SECRET = "whsec_" + "c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seQ=="  # base64 of a test-only key
NOT_ASCII = ["²", "٣", "١٧٠٠٠٠٠٠٠٠", "𝟙𝟚𝟛"]


@pytest.mark.parametrize("stamp", NOT_ASCII)
def test_webhook_timestamp(stamp: str) -> None:
    body = b'{"event_type": "message.received"}'
    headers = sign_delivery(SECRET, "msg_1", 1_700_000_000, body) | {"svix-timestamp": stamp}
    verdict = verify_delivery(SECRET, headers, body, now=1_700_000_000)
    assert (verdict.ok, verdict.reason) == (False, "bad_timestamp")
    signed = sign_delivery(SECRET, "msg_1", 1_700_000_000, body)
    good = verify_delivery(SECRET, signed, body, now=1_700_000_000)
    assert good.ok  # the same delivery with its own timestamp passes: the refusal is the digits'


@pytest.mark.parametrize("code", ["²²²", "٢٥٠"])
async def test_lmtp_reply_code(tmp_path: Path, code: str) -> None:
    async def server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(f"{code} garden ready\r\n".encode())
        await writer.drain()
        await reader.read(100)
        writer.close()

    sock = tmp_path / "lmtp.sock"
    srv = await asyncio.start_unix_server(server, path=str(sock))
    try:
        with pytest.raises(TransportError, match="malformed reply line"):
            await LmtpClient(sock, timeout=5).connect()
    finally:
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize("port", [*NOT_ASCII, "99999", "0", "9" * 5000])
def test_smtp_port(port: str) -> None:
    with pytest.raises(MailboxError) as err:
        smtp_config(f"smtp.example.test:{port}", "starttls", env={})
    assert err.value.field == "smtp" and "port 1-65535" in str(err.value)
    assert smtp_config("smtp.example.test:587", "starttls", env={}).port == 587


@pytest.mark.parametrize("amount", ["٣", "²", "１０"])
def test_spend_limit_amount(amount: str) -> None:
    with pytest.raises(ValueError, match="is not AMOUNT"):
        parse_spend(f"solana-local/USDC={amount}/day")
    assert parse_spend("solana-local/USDC=3/day")[1].daily == 3


@pytest.mark.parametrize(("text", "want"), [
    ("2424", 2424), ("127.0.0.1:2424", ("127.0.0.1", 2424)), ("var/garden.sock", Path("var/garden.sock")),
    ("/run/a:1", Path("/run/a:1")), ("garden:sock", Path("garden:sock")),
    ("127.0.0.1:²", Path("127.0.0.1:²")),
])
def test_garden_endpoint(text: str, want: object) -> None:
    assert parse_endpoint(text) == want


@pytest.mark.parametrize("text", ["99999", "0", "127.0.0.1:65536", "127.0.0.1:0", "9" * 5000])
def test_garden_endpoint_number_that_is_no_port(tmp_path: Path, text: str) -> None:
    """A number past 65535 was an OverflowError from connect() (a traceback); now exit 2."""
    with pytest.raises(UsageError, match="a port is 1-65535"):
        parse_endpoint(text)
    eml = tmp_path / "m.eml"
    eml.write_bytes(b"Subject: x\r\n\r\nx\r\n")
    res = CliRunner().invoke(app, ["garden", "deliver", str(eml), "--to", "a@garden.local", "--from",
                                   "b@garden.local", "--endpoint", text, "--json"])
    assert res.exit_code == 2 and "a port is 1-65535" in res.output, res.output
