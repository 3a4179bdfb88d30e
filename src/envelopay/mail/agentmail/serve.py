"""An AgentMail inbox served: the loopback webhook endpoint (when a webhook secret is given)
and the polling fallback (when `poll_interval` > 0), each message handed to `consume`.

`disposition(status, oops)` says how an inbound step's outcome is labelled in the inbox.
The node reads these settings from its config (`envelopay.node.agentmail`); what AgentMail
re-composes and the guarantees: SPEC.md, "AgentMail".
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from envelopay.errors import ConfigError
from envelopay.mail.agentmail.client import AgentMailClient
from envelopay.mail.agentmail.inbox import AgentMailInbox, Disposition
from envelopay.mail.agentmail.server import WebhookServer
from envelopay.mail.agentmail.transport import EventLog
from envelopay.protocol.codes import OopsCode

__all__ = ["InboxSettings", "disposition", "serve_inbox"]

# A refusal for one of these is about the message's form: it is kept, labelled malformed.
_MALFORMED = frozenset({
    OopsCode.UNKNOWN_TYPE, OopsCode.INVALID_JSON, OopsCode.MISSING_FIELD, OopsCode.INVALID_FIELD,
    OopsCode.TYPE_MISMATCH, OopsCode.UNSUPPORTED_VERSION,
})


def disposition(status: str, oops: OopsCode | None) -> Disposition:
    """How an inbound step's outcome is labelled in the inbox."""
    if status in ("busy", "deferred"):
        return "retry"
    if status == "refused" and oops in _MALFORMED:
        return "malformed"
    return "ignored" if status == "ignored" else "processed"


@dataclass(frozen=True, slots=True)
class InboxSettings:
    """How the inbox is reached: a webhook (with its secret) and/or polling."""

    secret: str | None
    secret_env: str | None  # named in the refusal when neither way is set
    webhook_host: str
    webhook_port: int
    webhook_path: str
    poll_interval: float

    def __post_init__(self) -> None:
        if self.secret is None and self.poll_interval <= 0:
            raise ConfigError("transport: an AgentMail inbox needs a webhook secret "
                              f"(${self.secret_env}) or agentmail_poll_interval > 0")


async def serve_inbox(
    client: AgentMailClient,
    log: EventLog,
    consume: Callable[[bytes], Awaitable[Disposition]],
    settings: InboxSettings,
    stop: asyncio.Event,
    *,
    echo: Callable[[str], Any],
    clock: Callable[[], datetime],
    ready: Callable[[AgentMailInbox, WebhookServer | None], None] | None = None,
) -> None:
    """Serve until `stop`; the client is closed at the end."""
    s = settings
    inbox = AgentMailInbox(client, log, consume, clock, secret=s.secret)
    server = None
    tasks: list[asyncio.Task[Any]] = []
    try:
        if s.secret is not None:
            server = WebhookServer(inbox, s.webhook_host, s.webhook_port, s.webhook_path)
            await server.start()
            echo(f"AgentMail webhook for {client.inbox} at {server.url}")
        if s.poll_interval > 0:
            tasks.append(asyncio.create_task(inbox.poll(stop, s.poll_interval)))
            echo(f"polling AgentMail inbox {client.inbox} every {s.poll_interval:g} s")
        if ready is not None:
            ready(inbox, server)
        await stop.wait()
    finally:
        await asyncio.gather(*tasks, return_exceptions=True)
        if server is not None:
            await server.stop()
        await client.aclose()
