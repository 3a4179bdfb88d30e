"""A worker on an AgentMail inbox: the `[transport] kind = "agentmail"` settings read from
the config into the vendor's room (`envelopay.mail.agentmail`).

`agentmail_transport(cfg, store, clock)` is the node's Transport; `serve_agentmail(node,
cfg, stop)` runs the inbound side (`mail.agentmail.serve`), each message handed to the
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
from envelopay.mail.agentmail.client import AgentMailClient, AgentMailConfig
from envelopay.mail.agentmail.inbox import AgentMailInbox, Disposition
from envelopay.mail.agentmail.serve import InboxSettings, disposition, serve_inbox
from envelopay.mail.agentmail.server import WebhookServer
from envelopay.mail.agentmail.transport import AgentMailTransport

__all__ = ["InboundNode", "agentmail_client", "agentmail_transport", "disposition", "serve_agentmail"]

Clock = Callable[[], datetime]


class InboundNode(Protocol):
    """What the inbound side needs of a node (`node.agent_node.AgentNode` is one): the
    wiring imports this module, so this module does not import the wiring."""

    @property
    def store(self) -> Store: ...

    async def receive(self, raw: bytes) -> Outcome: ...


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


def inbox_settings(cfg: WorkerConfig) -> InboxSettings:
    t = cfg.transport
    secret = _env(t.agentmail_webhook_secret_env, "transport.agentmail_webhook_secret_env", required=False)
    return InboxSettings(secret, t.agentmail_webhook_secret_env, t.agentmail_webhook_host,
                         t.agentmail_webhook_port, t.agentmail_webhook_path, t.agentmail_poll_interval)


async def serve_agentmail(
    node: InboundNode,
    cfg: WorkerConfig,
    stop: asyncio.Event,
    *,
    echo: Callable[[str], Any] = print,
    clock: Clock = lambda: datetime.now(UTC),
    ready: Callable[[AgentMailInbox, WebhookServer | None], None] | None = None,
) -> None:
    settings = inbox_settings(cfg)  # refused (neither way in) before the client is built

    async def consume(raw: bytes) -> Disposition:
        outcome = await node.receive(raw)
        return disposition(outcome.status, outcome.oops)

    await serve_inbox(agentmail_client(cfg), node.store, consume, settings, stop, echo=echo, clock=clock,
                      ready=ready)
