"""How an agent's mail leaves: the garden (LMTP → Maildir) or SMTP submission.

Both satisfy `envelopay.engine.transport.Transport`; a permanent refusal is a
`DeliveryRefused`, anything else a TransportError the drainer retries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from envelopay.engine.transport import DeliveryRefused
from envelopay.errors import TransportError
from envelopay.mail.garden import LmtpClient
from envelopay.mail.smtp import SmtpConfig, send_raw

__all__ = ["GardenTransport", "SmtpTransport"]


@dataclass
class GardenTransport:
    """Deliver over LMTP to a GardenServer, reusing one connection (reconnect on error)."""

    endpoint: tuple[str, int] | Path
    timeout: float = 30.0
    auth: tuple[str, str] | None = None  # (user, secret) toward a garden with accounts

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

    async def send_many(self, raw: bytes, sender: str, recipients: Sequence[str]) -> None:
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
        if result.refused:
            why = "; ".join(f"{r}: {result.replies[r].code} {result.replies[r].text}" for r in result.refused)
            if any(result.replies[r].code >= 500 for r in result.refused):
                raise DeliveryRefused(f"garden refused {why}")
            raise TransportError(f"garden deferred {why}")

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            # Already broken; a fresh connection follows.
            with contextlib.suppress(OSError, TransportError):
                await client.close()

    async def close(self) -> None:
        await self._drop()


@dataclass
class SmtpTransport:
    """SMTP submission of the exact (signed) bytes, with mail.smtp's retries."""

    config: SmtpConfig

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        result = await send_raw(raw, sender=sender, recipient=recipient, config=self.config)
        if result.status == "permanent_failure":
            raise DeliveryRefused(f"SMTP refused: {result.code} {result.detail}")
        if result.status != "sent":
            raise TransportError(f"SMTP failed for now: {result.code} {result.detail}")

    async def close(self) -> None:
        return None
