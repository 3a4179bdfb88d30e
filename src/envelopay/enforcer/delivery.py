"""Where an allowed message goes: SMTP submission (mail.smtp) or the walled garden
(mail.garden). The enforcer is the only holder of these credentials and of the DKIM key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from envelopay.errors import TransportError, UsageError

if TYPE_CHECKING:
    from envelopay.dkim import DkimKey
    from envelopay.mail.smtp import SmtpConfig

__all__ = ["Deliverer", "GardenDeliverer", "Signer", "SmtpDeliverer", "dkim_signer"]

Signer = Callable[[bytes], bytes]


class Deliverer(Protocol):
    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        """Hand `raw` over for delivery; raise TransportError if it was not accepted."""
        ...


@dataclass
class SmtpDeliverer:
    """Submission through mail.smtp.send_raw: the exact (signed) bytes, one recipient."""

    config: SmtpConfig
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        from envelopay.mail.smtp import send_raw

        try:
            result = await send_raw(
                raw, sender=sender, recipient=recipient, config=self.config, sleep=self.sleep
            )
        except UsageError as exc:
            raise TransportError(f"smtp refused the message before sending: {exc}") from exc
        if not result.ok:
            code = f" {result.code}" if result.code else ""
            raise TransportError(f"smtp {result.status}{code}: {result.detail}")


@dataclass
class GardenDeliverer:
    """LMTP into the walled garden (a Unix socket path or a loopback port)."""

    endpoint: str | int | Path

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        from envelopay.mail import garden

        try:
            result = await garden.deliver(raw, sender, [recipient], self.endpoint)
        except (OSError, TransportError) as exc:
            raise TransportError(f"garden {self.endpoint}: {exc}") from exc
        if recipient not in result.delivered:
            reply = result.replies.get(recipient)
            raise TransportError(f"garden refused {recipient}: {reply.code if reply else '?'} "
                                 f"{reply.text if reply else ''}".strip())


def dkim_signer(
    key: DkimKey, *, selector: str, domain: str, clock: Callable[[], float] = time.time
) -> Signer:
    """Sign every outgoing message with d=`domain` (mail.dkim: relaxed/relaxed, oversigned)."""
    from envelopay import dkim

    def sign(raw: bytes) -> bytes:
        return dkim.sign(raw, selector=selector, domain=domain, key=key, timestamp=int(clock()))

    return sign
