"""Issue 11, item 9 end to end, on the defaults `envelopay init` writes: a worker whose
embedded garden (`worker serve --garden`) authenticates every sender, and a client CLI
holding its own garden secret (keys/garden.secret), admitted with `envelopay garden
account -c`. The worker's replies authenticate with the node's in-memory account; an
insider with the client's credential cannot send From the worker; an agent nobody
admitted cannot send at all."""

from __future__ import annotations

import asyncio
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._served import dkim_record, served
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.errors import TransportError
from envelopay.mail.garden import deliver
from envelopay.mail.garden_auth import authenticated_sender, load_accounts, read_secret, secret_hash
from envelopay.mail.maildir import mailbox_path
from envelopay.node.init import admit_agent, init_agent
from envelopay.node.serve import serve_worker

runner = CliRunner()
WORKER = "worker@garden.local"
CLIENT = "client@garden.local"


def _wire(cfg: Path, extra: str, records: str) -> None:
    text = cfg.read_text().replace('garden_root = "var/garden"', extra)
    cfg.write_text(text.replace("[dkim_records]\n", "[dkim_records]\n" + records))


def _files(garden: Path, address: str) -> list[Path]:
    return [p for p in mailbox_path(garden, address).glob("*/*") if p.is_file()]


def test_init_gives_the_agent_its_own_credential(tmp_path: Path) -> None:
    res = init_agent(tmp_path / "a", address=WORKER)
    assert res.garden_secret == tmp_path / "a" / "keys" / "garden.secret"
    assert stat.S_IMODE(res.garden_secret.stat().st_mode) == 0o600
    secret = read_secret(res.garden_secret)
    [account] = load_accounts(tmp_path / "a" / "garden-accounts.json")
    assert (account.user, account.secret_sha256) == (WORKER, secret_hash(secret))
    assert secret not in (tmp_path / "a" / "envelopay.toml").read_text()
    assert secret not in (tmp_path / "a" / "garden-accounts.json").read_text()
    # --force keeps the secret, as it keeps the keys.
    init_agent(tmp_path / "a", address=WORKER, force=True)
    assert read_secret(res.garden_secret) == secret
    # The CLI names the file, never its content.
    out = runner.invoke(app, ["init", "--address", CLIENT, "--dir", str(tmp_path / "c")])
    assert out.exit_code == 0 and "garden.secret" in out.output
    assert read_secret(tmp_path / "c" / "keys" / "garden.secret") not in out.output


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Path, Path, Path]]:
    wdir, cdir = tmp_path / "worker", tmp_path / "client"
    init_agent(wdir, address=WORKER)
    init_agent(cdir, address=CLIENT)
    sock = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp")) / "lmtp.sock"
    garden = tmp_path / "garden"

    common = f'garden_root = "{garden}"\ngarden_socket = "{sock}"\n'
    _wire(wdir / "envelopay.toml", common + f'garden_addresses = ["{CLIENT}", "other@garden.local"]\n',
          dkim_record(cdir, "client"))
    _wire(cdir / "envelopay.toml", common, dkim_record(wdir, "worker"))
    admitted = runner.invoke(app, ["garden", "account", "--accounts", str(wdir / "garden-accounts.json"),
                                   "-c", str(cdir / "envelopay.toml")])
    assert admitted.exit_code == 0, admitted.output
    assert read_secret(cdir / "keys" / "garden.secret") not in admitted.output
    cfg = load_config(wdir / "envelopay.toml")

    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        yield cdir, garden, sock


def test_both_sides_authenticate_and_the_garden_names_them(world: tuple[Path, Path, Path]) -> None:
    cdir, garden, _ = world
    ccfg = str(cdir / "envelopay.toml")
    res = runner.invoke(app, ["which", WORKER, "-c", ccfg, "--wait", "--timeout", "60"])
    assert res.exit_code == 0, res.output
    assert "received METHODS" in res.output
    [request] = [p.read_bytes() for p in _files(garden, WORKER)]
    [reply] = [p.read_bytes() for p in _files(garden, CLIENT)]
    assert authenticated_sender(request, authserv_id="garden.local") == CLIENT
    assert authenticated_sender(reply, authserv_id="garden.local") == f"node.{WORKER}"


def test_without_its_secret_the_client_cannot_send(world: tuple[Path, Path, Path]) -> None:
    cdir, garden, _ = world
    (cdir / "keys" / "garden.secret").unlink()
    res = runner.invoke(app, ["which", WORKER, "-c", str(cdir / "envelopay.toml")])
    assert res.exit_code != 0 and "garden.secret" in res.output
    assert _files(garden, WORKER) == []


def test_an_insider_with_the_clients_secret_cannot_send_from_the_worker(
    world: tuple[Path, Path, Path],
) -> None:
    cdir, garden, sock = world
    secret = read_secret(cdir / "keys" / "garden.secret")
    forged = f"From: {WORKER}\r\nTo: {CLIENT}\r\nSubject: FULFILL\r\nMessage-ID: <f1@garden.local>\r\n\r\n"
    result = asyncio.run(deliver(forged.encode(), CLIENT, [CLIENT, WORKER], sock, auth=(CLIENT, secret)))
    assert result.delivered == ()
    # A structured answer for each recipient: the enhanced code and who may not send as whom.
    for rcpt in (CLIENT, WORKER):
        assert result.replies[rcpt].code == 550
        assert result.replies[rcpt].text == f"5.7.1 {CLIENT} may not send From {WORKER}"
    assert _files(garden, CLIENT) == [] and _files(garden, WORKER) == []


def test_an_admitted_agent_cannot_send_from_the_workers_responder(world: tuple[Path, Path, Path]) -> None:
    """Issue 29, item 5: every default config declares a responder; it is the agent's own."""
    cdir, garden, sock = world
    [responder] = [r.address for r in load_config(cdir.parent / "worker" / "envelopay.toml").responders]
    secret = read_secret(cdir / "keys" / "garden.secret")
    forged = f"From: {responder}\r\nTo: {WORKER}\r\nSubject: x\r\nMessage-ID: <r1@garden.local>\r\n\r\n"
    result = asyncio.run(deliver(forged.encode(), CLIENT, [WORKER], sock, auth=(CLIENT, secret)))
    assert result.delivered == () and result.replies[WORKER].code == 550
    assert _files(garden, WORKER) == []


def test_an_agent_claiming_the_workers_address_is_not_admitted(
    world: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """Its config lists the worker's address (a case variant): `garden account -c` refuses it,
    exit 2, and the running garden, re-reading its file, still does not know it."""
    cdir, garden, sock = world
    accounts = cdir.parent / "worker" / "garden-accounts.json"
    other = init_agent(tmp_path / "other", address="other@garden.local")
    cfg = tmp_path / "other" / "envelopay.toml"
    cfg.write_text(cfg.read_text() + '\n[[responders]]\naddress = "Worker@Garden.Local"\n'
                   'handler = "envelopay.endpoints.reference:kv_get"\n'
                   'schema = "envelopay.endpoints.reference:KvGet"\n')
    before = accounts.read_bytes()
    res = runner.invoke(app, ["garden", "account", "--accounts", str(accounts), "-c", str(cfg)])
    assert res.exit_code == 2 and "worker@garden.local (held by worker@garden.local)" in res.output
    assert accounts.read_bytes() == before
    creds = ("other@garden.local", read_secret(other.garden_secret or Path()))
    raw = f"From: {WORKER}\r\nTo: {CLIENT}\r\nSubject: x\r\n\r\nhi\r\n".encode()
    with pytest.raises(TransportError, match="535"):
        asyncio.run(deliver(raw, "other@garden.local", [CLIENT], sock, auth=creds))
    assert _files(garden, CLIENT) == []


def test_an_agent_nobody_admitted_cannot_send_until_admitted(
    world: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    cdir, garden, sock = world
    other = init_agent(tmp_path / "other", address="other@garden.local")
    creds = ("other@garden.local", read_secret(other.garden_secret or Path()))
    raw = b"From: other@garden.local\r\nTo: worker@garden.local\r\nSubject: WHICH\r\n\r\nhi\r\n"
    with pytest.raises(TransportError, match="535"):
        asyncio.run(deliver(raw, "other@garden.local", [WORKER], sock, auth=creds))
    with pytest.raises(TransportError, match="530"):
        asyncio.run(deliver(raw, "other@garden.local", [WORKER], sock))
    assert _files(garden, WORKER) == []
    # Admitted while the garden runs: it re-reads its accounts file on the unknown login.
    admit_agent(cdir.parent / "worker" / "garden-accounts.json", tmp_path / "other" / "envelopay.toml")
    assert asyncio.run(deliver(raw, "other@garden.local", [WORKER], sock, auth=creds)).delivered == (WORKER,)


async def test_garden_open_is_the_loud_legacy_opt_out(tmp_path: Path) -> None:
    init_agent(tmp_path / "w", address=WORKER)
    sock = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp")) / "lmtp.sock"
    _wire(tmp_path / "w" / "envelopay.toml",
          f'garden_root = "{tmp_path / "garden"}"\ngarden_socket = "{sock}"\ngarden_open = true\n', "")
    cfg = load_config(tmp_path / "w" / "envelopay.toml")
    lines: list[str] = []
    stop, up = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(serve_worker(cfg, embedded_garden=True, echo=lines.append, stop=stop,
                                               ready=lambda _: up.set()))
    await asyncio.wait_for(up.wait(), 60)
    try:
        assert any(line.startswith("WARNING: garden_open = true") for line in lines), lines
        # Anyone may send, From anyone: that is what the opt-out means.
        raw = b"From: nobody@else.test\r\nTo: worker@garden.local\r\nSubject: hi\r\n\r\nhi\r\n"
        assert (await deliver(raw, "nobody@else.test", [WORKER], sock)).delivered == (WORKER,)
    finally:
        stop.set()
        await serving
