"""The agents' MCP front (`envelopay mcp`, stdio): one tool per protocol message, an inbox
check and a send-status check. It talks only to the enforcer, with the agent's token; it
holds no SMTP credential and enforces nothing itself (a guard on the machine the agent
drives is inside the blast radius).

Policy verdicts (sent, pending_approval, blocked, failed, unknown) come back as structured
results; only transport and configuration faults (no sender configured, not exactly one
recipient, the enforcer unreachable) are tool errors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from envelopay import __version__
from envelopay.enforcer.client.http_client import EnforcerClient
from envelopay.enforcer.client.mcp_payments import register_payment_tools
from envelopay.enforcer.send.model import SendRequest
from envelopay.errors import ConfigError, TransportError
from envelopay.mail.line_ends import read_message
from envelopay.protocol.parse import parse

__all__ = ["InboxReader", "MaildirInbox", "McpConfig", "build_server", "config_from_env", "run_stdio"]

InboxReader = Callable[[int], list[dict[str, Any]]]


@dataclass(frozen=True)
class McpConfig:
    enforcer: str  # URL or Unix socket path
    token: str
    address: str  # the agent's own address (From); the enforcer pins it anyway
    inbox: InboxReader | None = None


class MaildirInbox:
    """Reads the agent's Maildir (new/ and cur/) without changing it: newest first."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def __call__(self, limit: int) -> list[dict[str, Any]]:
        files: list[tuple[float, Path]] = []
        for sub in ("new", "cur"):
            folder = self.path / sub
            if not folder.is_dir():
                raise OSError(f"not a Maildir: {self.path}")
            for f in folder.iterdir():
                try:
                    files.append((f.stat().st_mtime, f))
                except OSError:
                    continue  # moved between new/ and cur/ meanwhile
        files.sort(key=lambda i: i[0], reverse=True)
        out: list[dict[str, Any]] = []
        for _, f in files[:limit]:
            try:
                raw = read_message(f)
            except OSError:
                continue
            parsed = parse(raw)
            entry: dict[str, Any] = {
                "key": f.name.split(":", 1)[0],
                "message_id": parsed.message_id,
                "from": parsed.from_addr,
                "subject": parsed.subject,
                "type": parsed.type.value if parsed.type is not None else None,
            }
            if parsed.message is not None:
                entry["body"] = parsed.message.model_dump(mode="json", exclude_none=True)
            out.append(entry)
        return out


def config_from_env(env: Mapping[str, str]) -> McpConfig:
    missing = [k for k in ("ENVELOPAY_ENFORCER", "ENVELOPAY_AGENT_TOKEN", "ENVELOPAY_AGENT_ADDRESS")
               if not env.get(k)]
    if missing:
        raise ConfigError(f"envelopay mcp needs {', '.join(missing)} in the environment")
    maildir = env.get("ENVELOPAY_AGENT_MAILDIR")
    return McpConfig(
        enforcer=env["ENVELOPAY_ENFORCER"],
        token=env["ENVELOPAY_AGENT_TOKEN"],
        address=env["ENVELOPAY_AGENT_ADDRESS"],
        inbox=MaildirInbox(Path(maildir)) if maildir else None,
    )


_DESCRIPTIONS = {
    "which": "Ask an agent what it sells (WHICH). body: {note?, task?, id?}",
    "methods": "Answer a WHICH with rails (METHODS). body: {rails: [{chain, token, wallet, price}], ...}",
    "pay": "Send a payment proof (PAY). body: {id, amount, token, chain, proof, invoice_ref?}",
    "order": "Order work (ORDER). body: {id, task, note?}",
    "fulfill": "Deliver the result of an order (FULFILL). body: {id, order_ref, result}",
    "invoice": "Bill for an order (INVOICE). body: {id, amount, token, chain, wallet, order_ref?}",
    "offer": "Propose a trade (OFFER). body: {id, give, want, wallet}",
    "accept": "Accept a trade (ACCEPT). body: {id, offer_ref, amount, token, chain, proof}",
    "oops": "Report an error (OOPS). body: {note, error?: {code}, ref?}",
}


def _one_recipient(to: str | list[str]) -> str:
    if isinstance(to, list):
        if len(to) != 1:
            raise ValueError("exactly one recipient per send")
        return to[0]
    return to


def _version() -> str:
    """The installed envelopay's version for the MCP handshake's serverInfo (it was "")."""
    try:
        return version("envelopay")
    except PackageNotFoundError:  # run from a source tree never installed
        return __version__


def build_server(config: McpConfig) -> Any:
    """The MCP server object (mcp's MCPServer) with the enforcer-backed tools."""
    # lazy: keeps mcp off this module's import
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    if not config.address:
        raise ConfigError("no sender address configured")
    server = MCPServer(name="envelopay", version=_version(), instructions=(
        "Send Envelopay messages through the send enforcer. A send returns a disposition: sent, "
        "pending_approval (a human decides; poll check_send_status), blocked, failed or unknown."
    ))

    async def _send(kind: str, to: str | list[str], body: dict[str, Any], subject_note: str | None,
                    in_reply_to: str | None, references: list[str] | None) -> dict[str, Any]:
        try:
            recipient = _one_recipient(to)
        except ValueError as exc:
            raise ToolError(str(exc)) from exc
        request = SendRequest(
            to=recipient, sender=config.address, subject=subject_note, msg_type=kind,
            body={**body, "type": kind, "v": body.get("v", "0.1.0")},
            in_reply_to=in_reply_to, references=tuple(references or ()),
        )
        try:
            async with EnforcerClient(config.enforcer, config.token) as client:
                disposition = await client.send(request)
        except TransportError as exc:
            raise ToolError(f"enforcer unreachable: {exc}") from exc
        return disposition.to_json()

    def _register(kind: str) -> None:
        async def send(
            to: str | list[str],
            body: dict[str, Any],
            subject_note: str | None = None,
            in_reply_to: str | None = None,
            references: list[str] | None = None,
        ) -> dict[str, Any]:
            return await _send(kind, to, body, subject_note, in_reply_to, references)

        server.tool(name=f"send_{kind}", description=_DESCRIPTIONS[kind] + (
            " Exactly one recipient. Returns the enforcer's disposition."))(send)

    for kind in _DESCRIPTIONS:
        _register(kind)

    @server.tool(name="check_send_status",
                 description="The state of one of your sends (by the id or approval_id a send returned).")
    async def check_send_status(id: str) -> dict[str, Any]:
        try:
            async with EnforcerClient(config.enforcer, config.token) as client:
                disposition = await client.status(id)
        except TransportError as exc:
            raise ToolError(f"enforcer unreachable: {exc}") from exc
        return disposition.to_json()

    @server.tool(name="check_inbox", description="The newest messages in your inbox, parsed.")
    async def check_inbox(limit: int = 20) -> dict[str, Any]:
        if config.inbox is None:
            raise ToolError("no inbox configured (set ENVELOPAY_AGENT_MAILDIR)")
        try:
            return {"messages": config.inbox(max(1, min(limit, 200)))}
        except OSError as exc:
            raise ToolError(f"inbox unreadable: {exc}") from exc

    _ = (check_send_status, check_inbox)

    register_payment_tools(server, config.enforcer, config.token)  # the agent holds no wallet key
    return server


def run_stdio(config: McpConfig) -> None:
    server = build_server(config)
    # The server logs to stderr at INFO; httpx would add a line for every call to the
    # enforcer, which says nothing the tool's result does not.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server.run("stdio")
