"""The one outbound seam: how a composed (and signed) message leaves.

`Transport.send(raw, sender, recipient)` hands exact bytes to the next hop (signed bytes
are never re-flattened). A refusal or a broken connection is a TransportError;
`DeliveryRefused` (its `permanent` set) says the next hop refused for good, so no one
retries. Both the engine's outbox drainer and the send enforcer send through it.

Some transports can also start a message's transaction before its body exists
(`EnvelopeOpener.open_envelope` → `Envelope`): the enforcer's PAY opens AUTH, MAIL FROM
and RCPT TO before its payment is broadcast, so a recipient the next hop refuses is heard
before any money moves, and sends the body once the payment is made.

One implementation per way out, each in this room:

    garden      GardenTransport (LMTP into the walled garden, one reused connection),
                GardenPool (several), GardenEnvelope
    submission  SmtpTransport (SMTP submission through aiosmtplib, a pool of pipelining
                connections), SmtpEnvelope
    mock        MockTransport: records what was sent, refuses or fails on request (tests)

AgentMail's REST transport is its vendor's (`envelopay.mail.agentmail.transport`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from envelopay.errors import TransportError

__all__ = ["DeliveryRefused", "Envelope", "EnvelopeOpener", "Transport"]


class DeliveryRefused(TransportError):
    """The next hop refused the message permanently (e.g. 550 unknown recipient)."""

    permanent = True


class Transport(Protocol):
    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        """Hand `raw` over for delivery; TransportError (DeliveryRefused: for good) if it
        was not accepted."""
        ...

    async def close(self) -> None: ...


class Envelope(Protocol):
    """One message's transaction opened before its body exists."""

    sender: str
    recipient: str

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        """Send `raw` short of its end, so that nothing is delivered yet; "" or why the
        message can never go this way (a permanent refusal)."""
        ...

    async def send_body(self, raw: bytes) -> None:
        """Finish with `raw`; the same contract as Transport.send. Once only."""
        ...

    def abort(self) -> None:
        """End it with nothing delivered; a no-op after send_body."""
        ...


@runtime_checkable
class EnvelopeOpener(Protocol):
    """The optional capability of a Transport: start the transaction now."""

    def open_envelope(self, *, sender: str, recipient: str) -> Envelope | None:
        """Start the transaction for (sender, recipient) now, or None: send() it is."""
        ...
