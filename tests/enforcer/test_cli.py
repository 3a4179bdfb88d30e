"""The operator CLI against a real `envelopay enforcer serve` process."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.enforcer.client.http_client import EnforcerClient


class _Keep:
    def __init__(self) -> None:
        self.messages: list[bytes] = []
        self.refuse = ""  # e.g. "451 4.7.1 greylisted": the reply to every message meanwhile

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.refuse:
            return self.refuse
        self.messages.append(bytes(envelope.content))
        return "250 OK"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[_Keep, int]]:
    keep = _Keep()
    port = _free_port()
    ctl = Controller(keep, hostname="127.0.0.1", port=port)
    ctl.start()
    yield keep, port
    ctl.stop()


@pytest.fixture
def served(tmp_path: Path, smtp: tuple[_Keep, int]) -> Iterator[tuple[str, Path]]:
    port = _free_port()
    token_file = tmp_path / "op.token"
    proc = subprocess.Popen(
        [sys.executable, "-m", "envelopay.cli", "enforcer", "serve", "--db", f"sqlite:///{tmp_path}/e.db",
         "--port", str(port), "--operator-token-file", str(token_file), "--smtp-host", "127.0.0.1",
         "--smtp-port", str(smtp[1]), "--smtp-security", "none"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # readiness: the service says where it listens
            if "enforcer listening on" in line:
                break
        else:
            raise AssertionError(f"enforcer did not start (exit {proc.wait()})")
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        yield f"http://127.0.0.1:{port}", token_file
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
        assert code == 0


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_operator_cli_end_to_end(served: tuple[str, Path], smtp: tuple[_Keep, int]) -> None:
    url, token_file = served
    common = ["--enforcer", url, "--operator-token-file", str(token_file)]
    r = cli("agent", "list", *common)
    assert r.exit_code == 0 and "no agents" in r.output
    r = cli("agent", "create", "sdr", "--address", "sdr@agents.test", "--allow", "bob@partner.test",
            "--hourly", "5", *common)
    assert r.exit_code == 0, r.output
    assert "5/hr · 100/day · 1 allowlisted" in r.output
    token = next(line.split("=", 1)[1] for line in r.output.splitlines()
                 if line.startswith("export ENVELOPAY_AGENT_TOKEN="))

    async def agent_sends() -> tuple[str, str]:
        async with EnforcerClient(url, token) as client:
            ok = await client.send({"to": "bob@partner.test", "from": "sdr@agents.test", "subject": "hi"})
            held = await client.send({"to": "carol@partner.test", "from": "sdr@agents.test", "subject": "hi"})
            return ok.status, held.approval_id or ""

    status, approval = asyncio.run(agent_sends())
    assert status == "sent" and approval
    r = cli("approvals", "list", *common)
    assert r.exit_code == 0 and approval in r.output and "PENDING" in r.output
    r = cli("approvals", "approve", approval, *common)
    assert r.exit_code == 0 and "SENT" in r.output
    # The outcome, and apart why it had been held: not 'SENT (recipient not on the allowlist)'.
    assert r.output.splitlines() == [f"{approval}: SENT (approved; it left)",
                                     "  it had been held: recipient not on the allowlist"]
    r = cli("approvals", "approve", approval, *common)
    assert r.exit_code == 1 and "conflict: the approval is SENT" in r.output
    r = cli("approvals", "reject", "no-such-id", *common)
    assert r.exit_code == 2 and "no approval" in r.output
    assert len(smtp[0].messages) == 2
    r = cli("agent", "kill", "sdr", *common)
    assert r.exit_code == 0
    r = cli("agent", "list", *common)
    assert "KILLED" in r.output
    r = cli("agent", "kill", "ghost", *common)
    assert r.exit_code == 2


def test_cli_bad_input_and_credentials(served: tuple[str, Path], tmp_path: Path) -> None:
    url, token_file = served
    common = ["--enforcer", url, "--operator-token-file", str(token_file)]
    r = cli("agent", "create", "x", "--address", "a@b.test, c@d.test", *common)
    assert r.exit_code == 2 and "single bare address" in r.output
    wrong = tmp_path / "wrong.token"
    wrong.write_text("not-the-operator\n")
    r = cli("agent", "list", "--enforcer", url, "--operator-token-file", str(wrong))
    assert r.exit_code == 2 and "refused the operator credential" in r.output
    r = cli("agent", "list", "--enforcer", url, "--operator-token-file", str(tmp_path / "missing"))
    assert r.exit_code == 3  # the environment: the credential file is not there
    r = cli("agent", "list", "--enforcer", f"http://127.0.0.1:{_free_port()}", "--operator-token-file",
            str(token_file))
    assert r.exit_code == 3 and "unreachable" in r.output  # the environment: the enforcer is down


def test_serve_refuses_bad_configuration(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ENVELOPAY_OPERATOR_TOKEN"}
    r = subprocess.run(
        [sys.executable, "-m", "envelopay.cli", "enforcer", "serve", "--db", str(tmp_path / "e.db"),
         "--operator-token-file", str(tmp_path / "t")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert r.returncode == 2 and "exactly one of --smtp-host or --garden" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "envelopay.cli", "enforcer", "serve", "--db", "mysql://x", "--garden", "9",
         "--operator-token-file", str(tmp_path / "t")],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert r.returncode == 2 and "unsupported store URL" in r.stderr
