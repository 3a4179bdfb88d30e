"""A plain `init` and `worker serve --garden` are enough for `call` (issue 30 item 5): the
config names no garden socket or port, so the worker records where its in-process garden
listens beside the garden root, and every command of that config finds it there."""

from __future__ import annotations

import json
from pathlib import Path

from tests._served import served
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.node.agent_node import garden_endpoint_file
from envelopay.node.init import init_agent
from envelopay.node.serve import serve_worker

runner = CliRunner()
WORKER = "worker@garden.local"


def test_init_prints_its_responder_address(tmp_path: Path) -> None:
    res = runner.invoke(app, ["init", "--address", WORKER, "--dir", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    assert "responder" in res.output and "kv-worker@garden.local" in res.output
    res = runner.invoke(app, ["init", "--address", WORKER, "--dir", str(tmp_path / "j"), "--json"])
    assert json.loads(res.stdout)["responders"] == ["kv-worker@garden.local"]


def test_call_finds_the_garden_worker_serve_runs(tmp_path: Path) -> None:
    init_agent(tmp_path, address=WORKER)
    cfg_path = tmp_path / "envelopay.toml"
    cfg = load_config(cfg_path)
    assert cfg.transport.garden_socket is None and cfg.transport.lmtp_port is None
    where = garden_endpoint_file(cfg)
    with served(lambda stop, ready: serve_worker(cfg, embedded_garden=True, echo=lambda _: None, stop=stop,
                                                 ready=ready)):
        assert where.is_file()
        res = runner.invoke(app, ["call", "kv-worker@garden.local", "--request", '{"key": "spec.version"}',
                                  "-c", str(cfg_path), "--timeout", "60"])
        assert res.exit_code == 0, res.output
        assert '"value": "0.1.0"' in res.output
    assert not where.exists()  # a stopped worker leaves no address behind
    res = runner.invoke(app, ["call", "kv-worker@garden.local", "--request", '{"key": "spec.version"}',
                              "-c", str(cfg_path), "--timeout", "5"])
    assert res.exit_code == 3 and "worker serve --garden" in res.output


async def test_the_served_node_settles_its_own_calls_reply(tmp_path: Path) -> None:
    """`call` from the served config waits on the worker's own Maildir, where `worker serve`
    may take the reply first: the node settles it in the ledger (where the caller's wait
    reads it) instead of handing it to the engine as a Re: that is not protocol. Before,
    a call lost that race timed out."""
    from datetime import UTC, datetime, timedelta

    from envelopay.endpoints.calls import LedgerCalls
    from envelopay.node.agent_node import build_node
    from envelopay.testing import MockTransport

    nowhere = MockTransport()  # nothing is sent here: the node only reads
    init_agent(tmp_path, address=WORKER)
    cfg = load_config(tmp_path / "envelopay.toml")
    node = build_node(cfg, transport=nowhere)
    try:
        calls = LedgerCalls(node.store, local=WORKER)
        now = datetime.now(UTC)
        calls.add("call-1", "<q1@garden.local>", "kv-worker@garden.local", now + timedelta(seconds=60), now)
        reply = (
            b"From: kv-worker@garden.local\r\nTo: worker@garden.local\r\nSubject: Re: kv\r\n"
            b"Message-ID: <r1@garden.local>\r\nIn-Reply-To: <q1@garden.local>\r\n"
            b"Content-Type: application/json\r\n\r\n"
            b'{"status": "ok", "result": {"value": "0.1.0"}}\r\n'
        )
        outcome = await node.receive(reply)
        assert (outcome.status, outcome.detail) == ("ignored", "the reply to a call of ours: settled")
        settled = calls.get("call-1")
        assert settled is not None and settled.status == "ok"
        assert settled.result() is not None
        # Mail that answers no call of ours still goes to the engine.
        other = reply.replace(b"<q1@garden.local>", b"<nobody@garden.local>").replace(b"<r1@", b"<r2@")
        assert (await node.receive(other)).detail != "the reply to a call of ours: settled"
        assert nowhere.attempts == 0
    finally:
        node.store.close()
