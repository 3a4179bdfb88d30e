"""The MCP front over stdio (a real `envelopay mcp` subprocess, driven by the mcp client
library), talking to a running enforcer that delivers to aiosmtpd."""

from __future__ import annotations

import json
import mailbox
import os
import sys
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound

from .conftest import Sink


def _params(env: dict[str, str]) -> StdioServerParameters:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")}
    args = ["-m", "envelopay.cli", "mcp"]
    return StdioServerParameters(command=sys.executable, args=args, env={**base, **env})


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result
    data = result.structured_content
    assert isinstance(data, dict)
    return data


async def test_mcp_tools_return_dispositions_as_results(
    enforcer: Enforcer, service: str, sink: Sink, tmp_path: Path
) -> None:
    _, token = await enforcer.create_agent("mcp1", "mcp1@agents.test", allow=("shop.test",), hourly=1)
    inbox = tmp_path / "inbox"
    box = mailbox.Maildir(inbox, create=True)
    box.add(compose(Outbound(sender="worker@shop.test", recipient="mcp1@agents.test",
                             message=Which(note="hello from the shop"), message_id="<in1@shop.test>",
                             date=datetime(2027, 1, 15, tzinfo=UTC))))
    env = {"ENVELOPAY_ENFORCER": service, "ENVELOPAY_AGENT_TOKEN": token,
           "ENVELOPAY_AGENT_ADDRESS": "mcp1@agents.test", "ENVELOPAY_AGENT_MAILDIR": str(inbox)}
    async with Client(_params(env), read_timeout_seconds=60) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {f"send_{k}" for k in ("which", "methods", "pay", "order", "fulfill", "invoice", "offer",
                                       "accept", "oops")} <= names
        assert {"check_inbox", "check_send_status"} <= names

        sent = _structured(await client.call_tool("send_which", {"to": "worker@shop.test",
                                                                 "body": {"note": "menu?"}}))
        assert sent["status"] == "sent" and sent["message_id"]
        # Over the hourly cap of 1: a verdict, not an error.
        flagged = _structured(await client.call_tool("send_order", {
            "to": ["worker@shop.test"], "body": {"id": "o1", "task": "summarize"}}))
        assert flagged["status"] == "pending_approval" and flagged["approval_id"]
        blocked = _structured(await client.call_tool("send_which", {"to": "a@x.test, b@y.test", "body": {}}))
        assert blocked["status"] == "blocked" and blocked["reason"].startswith("invalid recipient")
        bad_pay = {"to": "worker@shop.test", "body": {"id": "p"}}
        invalid = _structured(await client.call_tool("send_pay", bad_pay))
        assert invalid["status"] == "blocked" and invalid["reason"].startswith("invalid message")

        status = _structured(await client.call_tool("check_send_status", {"id": flagged["approval_id"]}))
        assert (status["status"], status["state"]) == ("pending_approval", "pending")
        other = _structured(await client.call_tool("check_send_status", {"id": "someone-elses"}))
        assert other["status"] == "unknown"

        two = await client.call_tool("send_which", {"to": ["a@x.test", "b@y.test"], "body": {}})
        assert two.is_error and "exactly one recipient" in str(two.content)

        messages = _structured(await client.call_tool("check_inbox", {}))["messages"]
        assert len(messages) == 1 and messages[0]["type"] == "which"
        assert messages[0]["body"]["note"] == "hello from the shop"
        assert messages[0]["from"] == "worker@shop.test"
    assert len(sink.messages) == 1


async def test_mcp_transport_fault_is_a_tool_error(tmp_path: Path) -> None:
    env = {"ENVELOPAY_ENFORCER": str(tmp_path / "no-such.sock"), "ENVELOPAY_AGENT_TOKEN": "t",
           "ENVELOPAY_AGENT_ADDRESS": "mcp1@agents.test"}
    async with Client(_params(env), read_timeout_seconds=60) as client:
        result = await client.call_tool("send_which", {"to": "worker@shop.test", "body": {}})
        assert result.is_error and "enforcer unreachable" in str(result.content)
        inbox = await client.call_tool("check_inbox", {})
        assert inbox.is_error and "no inbox configured" in str(inbox.content)


async def test_mcp_stderr_logs_no_request_per_call(enforcer: Enforcer, service: str, tmp_path: Path) -> None:
    """stderr is the server's log: no line per HTTP call to the enforcer, and never the token."""
    import asyncio

    _, token = await enforcer.create_agent("mcp2", "mcp2@agents.test")
    env = {**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PYTHONPATH")},
           "ENVELOPAY_ENFORCER": service, "ENVELOPAY_AGENT_TOKEN": token,
           "ENVELOPAY_AGENT_ADDRESS": "mcp2@agents.test", "COLUMNS": "200"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envelopay.cli", "mcp", env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"},
        }},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "check_send_status", "arguments": {"id": "nobody"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "balances", "arguments": {}}},
    ]
    proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
    await proc.stdin.drain()
    answers: dict[int, Any] = {}
    while len(answers) < 3:
        msg = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
        answers[msg.get("id")] = msg
    proc.stdin.close()
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    # The server says which envelopay it is (it said "": issue 30 item 5).
    assert answers[1]["result"]["serverInfo"] == {"name": "envelopay", "version": version("envelopay")}
    assert answers[2]["result"]["structuredContent"]["status"] == "unknown"
    assert "result" in answers[3]  # the call reached the enforcer (a structured answer either way)
    assert b"HTTP Request" not in err and token.encode() not in err, err[-2000:]
