"""Where an allowed message goes: SMTP submission (mail.smtp) or the walled garden
(mail.garden). The enforcer is the only holder of these credentials and of the DKIM key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

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
    """Submission of the exact (signed) bytes, one recipient, one transaction per message.

    Fast path: a small pool of open connections (a new TCP+EHLO+AUTH per message costs
    more than every policy check together). Any failure on a pooled connection other
    than a permanent 5xx refusal falls back to mail.smtp.send_raw on a fresh connection,
    with its retries and backoff; a 5xx is final either way."""

    config: SmtpConfig
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)
    pool_size: int = 8
    _idle: list[Any] = field(default_factory=list, init=False, repr=False)

    async def _connect(self) -> Any:
        import aiosmtplib

        c = self.config
        client = aiosmtplib.SMTP(
            hostname=c.host, port=c.port, use_tls=c.security == "tls", start_tls=c.security == "starttls",
            tls_context=c.tls_context, timeout=c.timeout, local_hostname=c.local_hostname,
        )
        await client.connect()
        if c.username is not None and c.password is not None:
            await client.login(c.username, c.password)
        return client

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        import aiosmtplib

        if self.pool_size > 0:
            client: Any = None
            try:
                client = self._idle.pop() if self._idle else await self._connect()
                await client.sendmail(sender, [recipient], raw)
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
                if client is not None:
                    client.close()
                if _permanent(exc):
                    raise TransportError(f"smtp permanent_failure: {exc}") from exc
            else:
                if len(self._idle) < self.pool_size:
                    self._idle.append(client)
                else:
                    await _quit(client)
                return
        await self._send_raw(raw, sender=sender, recipient=recipient)

    async def _send_raw(self, raw: bytes, *, sender: str, recipient: str) -> None:
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

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for client in idle:
            await _quit(client)


def _permanent(exc: BaseException) -> bool:
    import aiosmtplib

    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return bool(exc.recipients) and all(r.code >= 500 for r in exc.recipients)
    return isinstance(exc, aiosmtplib.SMTPResponseException) and exc.code >= 500


async def _quit(client: Any) -> None:
    import aiosmtplib

    try:
        await client.quit()
    except (aiosmtplib.SMTPException, OSError, TimeoutError):
        client.close()


@dataclass
class GardenDeliverer:
    """LMTP into the walled garden (a Unix socket path or a loopback port).

    auth -- the enforcer's garden credential (user, secret): a garden with accounts
            lets it send only as the addresses its account lists (its agents')."""

    endpoint: str | int | Path
    auth: tuple[str, str] | None = None

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        from envelopay.mail import garden

        try:
            result = await garden.deliver(raw, sender, [recipient], self.endpoint, auth=self.auth)
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
