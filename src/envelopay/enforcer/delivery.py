"""Where an allowed message goes: SMTP submission or the walled garden. The enforcer is the
only holder of these credentials and of the DKIM key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from envelopay.errors import TransportError

__all__ = ["Deliverer", "GardenDeliverer", "Signer", "SmtpDeliverer"]

Signer = Callable[[bytes], bytes]


class Deliverer(Protocol):
    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        """Hand `raw` over for delivery; raise TransportError if it was not accepted."""
        ...


@dataclass
class SmtpDeliverer:
    host: str
    port: int
    username: str | None = None
    password: str | None = None
    starttls: bool = False
    implicit_tls: bool = False
    timeout: float = 30.0

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        import aiosmtplib

        # sendmail with the exact bytes: send_message would re-flatten after signing.
        try:
            async with aiosmtplib.SMTP(
                hostname=self.host,
                port=self.port,
                use_tls=self.implicit_tls,
                start_tls=self.starttls,
                timeout=self.timeout,
            ) as smtp:
                if self.username:
                    await smtp.login(self.username, self.password or "")
                _, refused_msg = await smtp.sendmail(sender, [recipient], raw)
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise TransportError(f"smtp {self.host}:{self.port}: {exc}") from exc
        _ = refused_msg


@dataclass
class GardenDeliverer:
    """LMTP into the walled garden (H5's garden.deliver)."""

    target: str | int  # Unix socket path or loopback port

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        from envelopay.mail import garden

        try:
            result = await garden.deliver(raw, sender, [recipient], self.target)
        except OSError as exc:
            raise TransportError(f"garden {self.target}: {exc}") from exc
        _ = result
