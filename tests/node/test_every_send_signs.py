"""Every path that sends an agent's mail signs it when its config names a `dkim_key`
(issue 30 item 5: `mail reply` went out without a DKIM-Signature). Each signature checked
by our verifier against the DNS record `init` wrote: `mail reply` over SMTP (aiosmtpd), and
in the garden `call`'s request and the responder's reply; the client commands go through
the engine's outbox, which signs (tests/engine)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from tests._served import served
from typer.testing import CliRunner

from envelopay import dkim
from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.dkim.lookup import table_dns
from envelopay.mail.maildir import deliver_file, ensure_maildir, mailbox_path
from envelopay.node.init import init_agent
from envelopay.node.serve import serve_worker
from envelopay.testing.dovecot import free_port

runner = CliRunner()
WORKER = "worker@garden.local"


class Sink:
    def __init__(self) -> None:
        self.got: list[bytes] = []

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes)
        self.got.append(envelope.content)
        return "250 OK"


@pytest.fixture
def smtp_sink() -> Iterator[tuple[Sink, int]]:
    sink, port = Sink(), free_port()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink, port
    finally:
        controller.stop()


def _verdict(agent_dir: Path, raw: bytes) -> dkim.DkimResult:
    record = (agent_dir / "keys" / "dkim.txt").read_text().strip()
    return asyncio.run(dkim.verify(raw, dns=table_dns({"worker._domainkey.garden.local": record})))


def test_mail_reply_signs_with_the_configs_key(tmp_path: Path, smtp_sink: tuple[Sink, int]) -> None:
    sink, port = smtp_sink
    init_agent(tmp_path, address=WORKER)
    cfg = load_config(tmp_path / "envelopay.toml")
    inbox = ensure_maildir(mailbox_path(cfg.path(cfg.transport.garden_root), WORKER))
    deliver_file(inbox, b"From: peer@example.test\r\nTo: worker@garden.local\r\nSubject: hello\r\n"
                        b"Message-ID: <p1@example.test>\r\n\r\nhi\r\n", fsync=False)
    config = str(tmp_path / "envelopay.toml")
    rows = json.loads(runner.invoke(app, ["mail", "check", "--config", config, "--json"]).stdout)
    res = runner.invoke(app, ["mail", "reply", str(rows[0]["id"]), "-m", "thanks", "--smtp",
                              f"127.0.0.1:{port}", "--security", "none", "--config", config, "--json"])
    assert res.exit_code == 0, res.output
    [raw] = sink.got
    assert b"DKIM-Signature:" in raw
    verdict = _verdict(tmp_path, raw)
    assert (verdict.status, verdict.domain, verdict.aligned) == ("pass", "garden.local", True)


def test_call_and_its_responder_sign(tmp_path: Path) -> None:
    init_agent(tmp_path, address=WORKER)
    cfg = load_config(tmp_path / "envelopay.toml")
    root = cfg.path(cfg.transport.garden_root)
    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        res = runner.invoke(app, ["call", "kv-worker@garden.local", "--request", '{"key": "spec.version"}',
                                  "-c", str(tmp_path / "envelopay.toml"), "--timeout", "60"])
        assert res.exit_code == 0, res.output
    kv = mailbox_path(root, "kv-worker@garden.local")
    requests = [p.read_bytes() for p in kv.glob("*/*") if p.is_file()]
    replies = [p.read_bytes() for p in mailbox_path(root, WORKER).glob("*/*") if p.is_file()]
    assert len(requests) == 1 and len(replies) == 1
    for raw in (*requests, *replies):
        assert _verdict(tmp_path, raw).status == "pass", raw[:400]
