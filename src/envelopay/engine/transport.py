"""The seam the outbox drainer sends through: `Transport` and its permanent refusal.

`Transport.send(raw, sender, recipient)` hands exact bytes to the next hop (signed
bytes are never re-flattened). A refusal or a broken connection is a TransportError;
`permanent` tells the drainer not to retry. The transports themselves (the garden's
LMTP, SMTP submission) are wired in `envelopay.node.transports`.
"""

from __future__ import annotations

from typing import Protocol

from envelopay.errors import TransportError

__all__ = ["DeliveryRefused", "Transport"]


class DeliveryRefused(TransportError):
    """The next hop refused the message permanently (e.g. 550 unknown recipient)."""

    permanent = True


class Transport(Protocol):
    async def send(self, raw: bytes, sender: str, recipient: str) -> None: ...

    async def close(self) -> None: ...
