"""A small world for the CLI contract tests: a worker served by `envelopay worker serve
--json` (embedded garden), a client configured beside it, a send enforcer served by
`envelopay enforcer serve --json` in front of an SMTP sink, and a stand-alone garden
served by `envelopay garden serve --json`. Each server is a real process whose one
document on stdout says it is ready (that document is what the tests check)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from tests._served import dkim_record, wire_garden

from envelopay.mail.garden_auth import add_account
from envelopay.node.init import admit_agent, init_agent

WORKER = "worker@garden.local"
CLIENT = "client@garden.local"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sink:
    """An SMTP server that keeps what it gets and refuses, for good, any recipient
    whose local part is `refuse`."""

    def __init__(self) -> None:
        self.messages: list[bytes] = []

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address.startswith("refuse@"):
            return "550 5.1.1 no such user"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(bytes(envelope.content))
        return "250 OK"


@dataclass
class Served:
    """A server process and the one document it printed when ready."""

    proc: subprocess.Popen[str]
    ready: dict[str, Any]
    stdout_rest: list[str] = field(default_factory=list)


def serve(argv: list[str], env: dict[str, str] | None = None) -> Served:
    """Start `envelopay ARGV --json`; its first stdout line is the ready document."""
    proc = subprocess.Popen([sys.executable, "-m", "envelopay.cli", *argv, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until ready (or the process ends: "")
    assert line, f"{argv[:2]} ended before it was ready (exit {proc.wait()})"
    return Served(proc, json.loads(line))


def stop(served: Served) -> int:
    served.proc.terminate()
    code = served.proc.wait(timeout=60)
    assert served.proc.stdout is not None
    served.stdout_rest = served.proc.stdout.read().splitlines()
    served.proc.stdout.close()
    return code


@dataclass
class World:
    tmp: Path
    wcfg: Path
    ccfg: Path
    garden_sock: Path
    worker: Served
    enforcer: Served
    enforcer_db: str
    token_file: Path
    garden: Served
    sink: Sink
    smtp: Controller
    smtp_port: int
    saved: dict[str, Any] = field(default_factory=dict)  # what one step leaves for the next

    @property
    def operator(self) -> list[str]:
        return ["--enforcer", self.enforcer.ready["listening"], "--operator-token-file", str(self.token_file)]


@pytest.fixture(scope="session")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("cli")
    wdir, cdir = tmp / "worker", tmp / "client"
    init_agent(wdir, address=WORKER)
    init_agent(cdir, address=CLIENT)
    short = Path(tempfile.mkdtemp(prefix="ep", dir="/tmp"))  # a Unix socket path must be short
    sock = short / "lmtp.sock"

    wire_garden(wdir / "envelopay.toml", tmp / "garden", sock, dkim_record(cdir, "client"), [CLIENT])
    wire_garden(cdir / "envelopay.toml", tmp / "garden", sock, dkim_record(wdir, "worker"), [])
    # The worker's garden authenticates: the client is admitted by its own secret, and the
    # hand-written mail of `garden deliver` comes from an account made for peer@.
    admit_agent(wdir / "garden-accounts.json", cdir / "envelopay.toml")
    peer_secret = add_account(wdir / "garden-accounts.json", "peer@garden.local", ["peer@garden.local"])

    sink = Sink()
    smtp_port = free_port()
    smtp = Controller(sink, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    env = {k: v for k, v in os.environ.items() if k != "ENVELOPAY_OPERATOR_TOKEN"}
    db = f"sqlite:///{tmp}/enforcer.db"
    token_file = tmp / "op.token"
    (tmp / "vault.key").write_text("a-vault-secret-for-the-contract-test-only\n")
    worker = serve(["worker", "serve", "-c", str(wdir / "envelopay.toml"), "--garden"])
    enforcer = serve(["enforcer", "serve", "--db", db, "--port", str(free_port()), "--operator-token-file",
                      str(token_file), "--smtp-host", "127.0.0.1", "--smtp-port", str(smtp_port),
                      "--smtp-security", "none", "--vault-key-file", str(tmp / "vault.key")], env=env)
    garden = serve(["garden", "serve", "--root", str(tmp / "g2"), "--address", "a@garden.local",
                    "--port", "0", "--open"])
    w = World(tmp, wdir / "envelopay.toml", cdir / "envelopay.toml", sock, worker, enforcer, db, token_file,
              garden, sink, smtp, smtp_port)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("ENVELOPAY_GARDEN_SECRET", peer_secret)  # read by `garden deliver --user`
            yield w
    finally:
        for served in (garden, enforcer, worker):
            if served.proc.poll() is None:
                stop(served)
        smtp.stop()
