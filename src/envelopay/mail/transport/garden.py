"""The walled garden as a Transport: LMTP into its Maildirs.

A permanent refusal (a 5xx) is a `DeliveryRefused`, anything else a TransportError the
sender may retry. `GardenPool` holds several connections, for a drain that delivers the
replies of several flows at once (each delivery waits for the garden's fsync).
`open_envelope` starts a message's transaction before its body exists (`GardenEnvelope`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass

from envelopay.errors import TransportError, UsageError
from envelopay.mail.transport import DeliveryRefused
from envelopay.mail.transport.lmtp_client import DeliveryResult, Endpoint, LmtpClient, Refused, Reply, deliver

__all__ = ["GardenEnvelope", "GardenPool", "GardenTransport"]


@dataclass
class GardenTransport:
    """Deliver over LMTP to a GardenServer.

    reuse -- keep one connection (one transaction at a time; reconnect on error), or open
             one per message (any number at once: the send enforcer's way)
    hold -- s an early transaction (open_envelope) may wait for its body
    """

    endpoint: Endpoint
    timeout: float = 30.0
    auth: tuple[str, str] | None = None  # (user, secret) toward a garden with accounts
    reuse: bool = True
    hold: float = 8.0

    def __post_init__(self) -> None:
        self._client: LmtpClient | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> object:
        if self._client is None:
            client = LmtpClient(self.endpoint, timeout=self.timeout, auth=self.auth)
            await client.connect()
            self._client = client
        return self._client

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        await self.send_many(raw, sender, [recipient])

    def open_envelope(self, *, sender: str, recipient: str) -> GardenEnvelope:
        return GardenEnvelope(self, sender, recipient)

    async def send_many(self, raw: bytes, sender: str, recipients: Sequence[str]) -> None:
        if not self.reuse:
            try:
                once = await deliver(raw, sender, recipients, self.endpoint, timeout=self.timeout,
                                     auth=self.auth)
            except (OSError, TransportError) as exc:
                raise TransportError(f"garden {self.endpoint}: {exc}") from exc
            _require_delivered(once, recipients)
            return
        async with self._lock:
            for attempt in (1, 2):
                try:
                    await self._connected()
                    assert self._client is not None
                    result = await self._client.send(raw, sender, recipients)
                    break
                except TransportError:
                    await self._drop()
                    if attempt == 2:
                        raise
                except OSError as exc:
                    await self._drop()
                    if attempt == 2:
                        raise TransportError(f"garden unreachable: {exc}") from exc
        _require_delivered(result, recipients)

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            # Already broken; a fresh connection follows.
            with contextlib.suppress(OSError, TransportError):
                await client.close()

    async def close(self) -> None:
        await self._drop()


def _require_delivered(result: DeliveryResult, recipients: Sequence[str]) -> None:
    """DeliveryRefused (a 5xx) or TransportError (for now) with the garden's replies unless
    every recipient got the message."""
    missing = [r for r in recipients if r not in result.delivered]
    if not missing:
        return
    replies = [(r, result.replies.get(r)) for r in missing]
    why = "; ".join(f"{r}: {p.code} {p.text}" if p else f"{r}: ?" for r, p in replies)
    if any(p is None or p.code >= 500 for _, p in replies):
        raise DeliveryRefused(f"garden refused {why}")
    raise TransportError(f"garden deferred {why}")


class GardenEnvelope:
    """A PAY's LMTP transaction begun while its payment is signed: connect, AUTH, MAIL and
    RCPT in a task started now; DATA, the body and its final dot in deliver(), once the
    money moved. LMTP delivers nothing before the final dot (RFC 2033 §4.2, as SMTP), so
    abort() (or a crash) leaves nothing in the garden. A 5xx to the greeting, AUTH, MAIL or
    RCPT — an address the garden does not hold, a credential it refuses — is heard in
    stage(), before the broadcast: the caller does not pay (no money without its email),
    as over SMTP (SmtpEnvelope). Any other fault of the early transaction falls back to
    the transport's own send."""

    def __init__(self, owner: GardenTransport, sender: str, recipient: str) -> None:
        self.owner, self.sender, self.recipient = owner, sender, recipient
        self._client = LmtpClient(owner.endpoint, timeout=owner.timeout, auth=owner.auth)
        self._task: asyncio.Task[Reply] = asyncio.ensure_future(self._client.open(sender, recipient))
        self._opened = time.monotonic()
        self._done = False

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        """Nothing of `raw` is written (the garden is local: the body goes at deliver);
        "" or why the message can never go this way (a 5xx heard within `wait` s)."""
        if self._done:
            return ""
        done, _ = await asyncio.wait({self._task}, timeout=wait)
        if not done:
            return ""
        refusal = self._refusal()
        if refusal is not None and refusal.code >= 500:
            return f"garden permanent_failure: {refusal.code} {refusal.text}"
        return ""

    def _refusal(self) -> Reply | None:
        """The error reply the finished early transaction met, if any."""
        if self._task.cancelled():
            return None
        exc = self._task.exception()
        if isinstance(exc, Refused):
            return exc.reply
        if exc is None and not self._task.result().ok:
            return self._task.result()
        return None

    async def send_body(self, raw: bytes) -> None:
        if self._done:
            raise RuntimeError("this envelope was already used")
        self._done = True
        try:
            rcpt: Reply | None = await self._task
        except (TransportError, UsageError):
            rcpt = None
        try:
            if rcpt is None or not rcpt.ok or time.monotonic() - self._opened > self.owner.hold:
                raise TransportError("the early transaction is not usable")
            await self._client.data()
        except TransportError as exc:
            # Nothing of the message was written: a 5xx is final, anything else (a 4xx, a
            # dropped or idle-timed-out connection) goes again on a fresh connection.
            self._client.drop()
            refusal = exc.reply if isinstance(exc, Refused) else self._refusal()
            if refusal is not None and refusal.code >= 500:
                why = f"{refusal.code} {refusal.text}"
                raise DeliveryRefused(f"garden refused {self.recipient}: {why}") from exc
            await self.owner.send(raw, self.sender, self.recipient)
            return
        try:
            # After the content the garden may have it: no second copy now (the caller's
            # record says not delivered; a retry keeps the Message-ID).
            result = await self._client.content(raw, self.recipient)
        except TransportError as exc:
            raise TransportError(f"garden {self.owner.endpoint}: {exc}") from exc
        finally:
            await self._client.close()
        _require_delivered(result, [self.recipient])

    def abort(self) -> None:
        if not self._done:
            self._done = True
            if not self._task.done():
                self._task.cancel()
            else:
                self._refusal()  # retrieved: it is moot now
            self._client.drop()


class GardenPool:
    """Several LMTP connections to the garden; a send takes a free one (each connection
    carries one transaction at a time). Connections open on first use."""

    def __init__(self, transports: Sequence[GardenTransport]) -> None:
        if not transports:
            raise ValueError("a garden pool needs at least one connection")
        self.size = len(transports)
        self._all = list(transports)
        self._free: asyncio.Queue[GardenTransport] = asyncio.Queue()
        for t in transports:
            self._free.put_nowait(t)

    @property
    def endpoint(self) -> Endpoint:
        return self._all[0].endpoint

    def open_envelope(self, *, sender: str, recipient: str) -> GardenEnvelope:
        return self._all[0].open_envelope(sender=sender, recipient=recipient)

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        conn = await self._free.get()
        try:
            await conn.send(raw, sender, recipient)
        finally:
            self._free.put_nowait(conn)

    async def close(self) -> None:
        for t in self._all:
            await t.close()
