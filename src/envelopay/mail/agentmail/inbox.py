"""An AgentMail inbox, in: raw MIME to the inbound path (out: `transport`).

In (`AgentMailInbox`). A webhook delivery is verified (`webhook`), its event id
looked up in the ledger (a delivery already handled is answered 200 "duplicate" and
nothing else happens), the message's raw bytes fetched, and handed to `consume` (the
engine's inbound path, DKIM included). Then the message gets a label
(`envelopay-processed` or `envelopay-malformed`, as the IMAP keywords) and the event
and message ids are recorded. A message the engine could not take yet ("retry") gets
neither, and the webhook answers 503 so AgentMail delivers it again. `poll_once()`
covers setups without a public URL: it lists received messages without our labels.
Guarantee: at least once per message into `consume`, whose Message-ID claim in the
ledger makes the step itself happen once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email import message_from_bytes, policy
from typing import Literal

from envelopay.errors import TransportError
from envelopay.mail.agentmail.client import AgentMailClient, AgentMailError
from envelopay.mail.agentmail.transport import EventLog, ledger_sources
from envelopay.mail.agentmail.webhook import DEFAULT_TOLERANCE, read_event, verify_delivery

__all__ = [
    "LABEL_MALFORMED",
    "LABEL_PROCESSED",
    "AgentMailInbox",
    "Disposition",
    "WebhookAnswer",
]

LABEL_PROCESSED = "envelopay-processed"
LABEL_MALFORMED = "envelopay-malformed"
Disposition = Literal["processed", "malformed", "ignored", "retry"]
Consume = Callable[[bytes], Awaitable[Disposition]]
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WebhookAnswer:
    status: int  # the HTTP status to answer with
    body: Mapping[str, str]


@dataclass
class AgentMailInbox:
    client: AgentMailClient
    log: EventLog
    consume: Consume
    clock: Callable[[], datetime]
    secret: str | None = None  # the webhook's whsec_… secret (from its environment variable)
    tolerance: int = DEFAULT_TOLERANCE
    lookback: timedelta = timedelta(days=7)  # how far back polling looks
    handled: int = 0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def sources(self) -> tuple[str, str, str]:
        return ledger_sources(self.client.inbox)

    async def on_webhook(self, headers: Mapping[str, str], body: bytes) -> WebhookAnswer:
        if not self.secret:
            return WebhookAnswer(503, {"status": "refused", "reason": "no webhook secret configured"})
        verdict = verify_delivery(self.secret, headers, body, now=self.clock().timestamp(),
                                  tolerance=self.tolerance)
        if not verdict.ok:
            return WebhookAnswer(401, {"status": "refused", "reason": verdict.reason or "unverified"})
        event = read_event(body)
        if event is None:
            return WebhookAnswer(400, {"status": "refused", "reason": "not an AgentMail event"})
        events, _, _ = self.sources
        if self.log.event_seen(events, event.event_id):
            return WebhookAnswer(200, {"status": "duplicate", "event_id": event.event_id})
        if event.event_type != "message.received" or event.message_id is None:
            # Spam/blocked/unauthenticated deliveries and other events: not for the worker.
            self.log.event_done(events, event.event_id, self.clock(), {"ignored": event.event_type})
            return WebhookAnswer(200, {"status": "ignored", "event_type": event.event_type})
        if event.inbox_id is not None and event.inbox_id.lower() != self.client.inbox.lower():
            return WebhookAnswer(200, {"status": "ignored", "reason": "another inbox"})
        try:
            disposition = await self.handle_message(event.message_id, event.thread_id)
        except TransportError as exc:
            return WebhookAnswer(503, {"status": "retry", "reason": str(exc)[:200]})
        if disposition == "retry":
            return WebhookAnswer(503, {"status": "retry", "event_id": event.event_id})
        self.log.event_done(events, event.event_id, self.clock(), {"message_id": event.message_id})
        return WebhookAnswer(200, {"status": disposition, "event_id": event.event_id})

    async def handle_message(
        self, message_id: str, thread_id: str | None
    ) -> Disposition | Literal["duplicate"]:
        """Fetch one message's raw bytes, hand them to `consume`, label and record it."""
        _, messages, ids = self.sources
        async with self._lock:  # a webhook and the poller may name the same message at once
            if self.log.event_seen(messages, message_id):
                return "duplicate"
            raw = await self.client.raw(message_id)
            rfc_id = message_from_bytes(raw, policy=policy.compat32).get("Message-ID")
            if isinstance(rfc_id, str) and rfc_id.strip():
                self.log.event_done(ids, rfc_id.strip(), self.clock(),
                                    {"message_id": message_id, "thread_id": thread_id or ""})
            disposition = await self.consume(raw)
            if disposition == "retry":
                return disposition
            label = LABEL_MALFORMED if disposition == "malformed" else LABEL_PROCESSED
            try:
                await self.client.label(message_id, add=[label])
            except AgentMailError as exc:  # the ledger record below keeps it from coming again
                _log.warning("%s: could not label %s: %s", self.client.inbox, message_id, exc)
            self.log.event_done(messages, message_id, self.clock(), {"disposition": disposition})
            self.handled += 1
            return disposition

    async def poll_once(self) -> int:
        """Handle every received message not yet handled; return how many were."""
        done = 0
        token: str | None = None
        after = self.clock() - self.lookback
        _, messages, _ = self.sources
        while True:
            items, token = await self.client.list_messages(labels=["received"], after=after, page_token=token)
            for item in items:
                if LABEL_PROCESSED in item.labels or LABEL_MALFORMED in item.labels:
                    continue
                if self.log.event_seen(messages, item.message_id):
                    continue
                if await self.handle_message(item.message_id, item.thread_id) not in ("retry", "duplicate"):
                    done += 1
            if token is None:
                return done

    async def poll(self, stop: asyncio.Event, interval: float = 15.0) -> None:
        while not stop.is_set():
            try:
                await self.poll_once()
            except TransportError as exc:
                _log.warning("%s: polling failed: %s", self.client.inbox, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
