"""Issue 11, item 9 end to end: a worker whose embedded garden has accounts, and a client
CLI holding its own garden credential. The worker's replies authenticate with the
node's in-memory account; the client's with its secret from the environment; an insider
with the client's credential cannot send From the worker."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _served import dkim_record, served
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.mail.garden import deliver
from envelopay.mail.garden_auth import add_account, authenticated_sender
from envelopay.mail.maildir import mailbox_path
from envelopay.node.init import init_agent
from envelopay.node.serve import serve_worker

runner = CliRunner()
WORKER = "worker@garden.local"
CLIENT = "client@garden.local"
ENV = "EP_TEST_GARDEN_SECRET"


def _wire(cfg: Path, extra: str, records: str) -> None:
    text = cfg.read_text().replace('garden_root = "var/garden"', extra)
    cfg.write_text(text.replace("[dkim_records]\n", "[dkim_records]\n" + records))


@pytest.fixture
def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path, Path, str]]:
    wdir, cdir = tmp_path / "worker", tmp_path / "client"
    init_agent(wdir, address=WORKER)
    init_agent(cdir, address=CLIENT)
    sock = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp")) / "lmtp.sock"
    garden = tmp_path / "garden"
    accounts = tmp_path / "garden-accounts.json"
    secret = add_account(accounts, CLIENT, [CLIENT])
    monkeypatch.setenv(ENV, secret)

    common = f'garden_root = "{garden}"\ngarden_socket = "{sock}"\n'
    worker_extra = f'garden_addresses = ["{CLIENT}"]\ngarden_accounts = "{accounts}"\n'
    _wire(wdir / "envelopay.toml", common + worker_extra, dkim_record(cdir, "client"))
    _wire(cdir / "envelopay.toml", common + f'garden_secret_env = "{ENV}"\n', dkim_record(wdir, "worker"))
    cfg = load_config(wdir / "envelopay.toml")

    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        yield cdir / "envelopay.toml", garden, sock, secret


def test_both_sides_authenticate_and_the_garden_names_them(secured: tuple[Path, Path, Path, str]) -> None:
    ccfg, garden, _, _ = secured
    res = runner.invoke(app, ["which", WORKER, "-c", str(ccfg), "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received METHODS" in res.output
    [request] = [p.read_bytes() for p in (mailbox_path(garden, WORKER)).glob("*/*") if p.is_file()]
    [reply] = [p.read_bytes() for p in (mailbox_path(garden, CLIENT)).glob("*/*") if p.is_file()]
    assert authenticated_sender(request, authserv_id="garden.local") == CLIENT
    assert authenticated_sender(reply, authserv_id="garden.local") == f"node.{WORKER}"


def test_without_its_secret_the_client_cannot_send(
    secured: tuple[Path, Path, Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ccfg, _, _, _ = secured
    monkeypatch.delenv(ENV)
    res = runner.invoke(app, ["which", WORKER, "-c", str(ccfg)])
    assert res.exit_code != 0 and ENV in res.output


def test_an_insider_with_the_clients_secret_cannot_send_from_the_worker(
    secured: tuple[Path, Path, Path, str],
) -> None:
    _, garden, sock, secret = secured
    forged = f"From: {WORKER}\r\nTo: {CLIENT}\r\nSubject: FULFILL\r\nMessage-ID: <f1@garden.local>\r\n\r\n"
    result = asyncio.run(deliver(forged.encode(), CLIENT, [CLIENT], sock, auth=(CLIENT, secret)))
    assert result.delivered == () and result.replies[CLIENT].code == 550
    assert not [p for p in mailbox_path(garden, CLIENT).glob("*/*") if p.is_file()]
