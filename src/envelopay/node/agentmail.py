"""A worker on an AgentMail inbox: the transport out, the webhook and polling in.

`agentmail_transport(cfg, store, clock)` is the node's Transport for
`[transport] kind = "agentmail"`; `serve_agentmail(node, cfg, stop)` runs the inbound
side: the loopback webhook endpoint (when a webhook secret is configured) and the
polling fallback (when `agentmail_poll_interval` > 0), each message handed to the
node's inbound path. What AgentMail re-composes and the guarantees: SPEC.md, "AgentMail".
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from envelopay.config import WorkerConfig
from envelopay.engine.outcome import Outcome
from envelopay.errors import ConfigError
from envelopay.ledger.store import Store
from envelopay.mail.agentmail import AgentMailClient, AgentMailConfig
from envelopay.mail.agentmail_inbox import AgentMailInbox, AgentMailTransport, Disposition
from envelopay.mail.agentmail_server import WebhookServer
from envelopay.protocol.codes import OopsCode

__all__ = ["InboundNode", "agentmail_client", "agentmail_transport", "disposition", "serve_agentmail"]

Clock = Callable[[], datetime]


class InboundNode(Protocol):
    """What the inbound side needs of a node (`node.wiring.AgentNode` is one): the
    wiring imports this module, so this module does not import the wiring."""

    @property
    def store(self) -> Store: ...

    async def receive(self, raw: bytes) -> Outcome: ...

# A refusal for one of these is about the message's form: it is kept, labelled malformed.
_MALFORMED = frozenset({
    OopsCode.UNKNOWN_TYPE, OopsCode.INVALID_JSON, OopsCode.MISSING_FIELD, OopsCode.INVALID_FIELD,
    OopsCode.TYPE_MISMATCH, OopsCode.UNSUPPORTED_VERSION,
})


def _env(name: str | None, what: str, *, required: bool) -> str | None:
    value = os.environ.get(name) if name else None
    if required and not value:
        raise ConfigError(f"{what}: ${name} is not set")
    return value or None


def inbox_id(cfg: WorkerConfig) -> str:
    """AgentMail's inbox id is the inbox's address: the agent's address."""
    return cfg.agent.address


def agentmail_client(cfg: WorkerConfig) -> AgentMailClient:
    t = cfg.transport
    key = _env(t.agentmail_api_key_env, "transport.agentmail_api_key_env", required=True)
    assert key is not None
    return AgentMailClient(AgentMailConfig(inbox_id(cfg), key, base_url=t.agentmail_base_url))


def agentmail_transport(cfg: WorkerConfig, store: Store, clock: Clock) -> AgentMailTransport:
    via = cfg.transport.agentmail_reply_via
    return AgentMailTransport(agentmail_client(cfg), store, clock, reply_via=via)


def disposition(status: str, oops: OopsCode | None) -> Disposition:
    """How an inbound step's outcome is labelled in the inbox."""
    if status in ("busy", "deferred"):
        return "retry"
    if status == "refused" and oops in _MALFORMED:
        return "malformed"
    return "ignored" if status == "ignored" else "processed"


async def serve_agentmail(
    node: InboundNode,
    cfg: WorkerConfig,
    stop: asyncio.Event,
    *,
    echo: Callable[[str], Any] = print,
    clock: Clock = lambda: datetime.now(UTC),
    ready: Callable[[AgentMailInbox, WebhookServer | None], None] | None = None,
) -> None:
    t = cfg.transport
    secret = _env(t.agentmail_webhook_secret_env, "transport.agentmail_webhook_secret_env", required=False)
    if secret is None and t.agentmail_poll_interval <= 0:
        raise ConfigError("transport: an AgentMail inbox needs a webhook secret "
                          f"(${t.agentmail_webhook_secret_env}) or agentmail_poll_interval > 0")
    client = agentmail_client(cfg)

    async def consume(raw: bytes) -> Disposition:
        outcome = await node.receive(raw)
        return disposition(outcome.status, outcome.oops)

    inbox = AgentMailInbox(client, node.store, consume, clock, secret=secret)
    server = None
    tasks: list[asyncio.Task[Any]] = []
    try:
        if secret is not None:
            server = WebhookServer(inbox, t.agentmail_webhook_host, t.agentmail_webhook_port,
                                   t.agentmail_webhook_path)
            await server.start()
            echo(f"AgentMail webhook for {inbox_id(cfg)} at {server.url}")
        if t.agentmail_poll_interval > 0:
            tasks.append(asyncio.create_task(inbox.poll(stop, t.agentmail_poll_interval)))
            echo(f"polling AgentMail inbox {inbox_id(cfg)} every {t.agentmail_poll_interval:g} s")
        if ready is not None:
            ready(inbox, server)
        await stop.wait()
    finally:
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.stop()
        await client.aclose()
