"""`MockTransport`: the seam's stand-in for tests, as httpx keeps one beside its transports.

It records every message it accepted, refuses chosen recipients for good (a 5xx:
`DeliveryRefused`), and fails the next sends for now (a 4xx or a dropped connection: a
plain TransportError) when asked. It also opens early envelopes (`open_envelope`), so a
PAY's early-envelope path runs against it too. Published as `envelopay.testing.MockTransport`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from envelopay.errors import TransportError
from envelopay.mail.transport import DeliveryRefused

__all__ = ["MockEnvelope", "MockTransport", "SentMail"]


@dataclass(frozen=True, slots=True)
class SentMail:
    raw: bytes
    sender: str
    recipient: str


class MockTransport:
    """A Transport (and EnvelopeOpener) that delivers into `sent`.

    refuse -- recipients refused for good (compared case-insensitively)
    envelopes -- whether open_envelope starts a transaction (else it answers None and
                 the caller sends plainly, as a transport without the capability)
    """

    def __init__(self, *, refuse: Iterable[str] = (), envelopes: bool = True) -> None:
        self.sent: list[SentMail] = []
        self.attempts = 0
        self.closed = False
        self.envelopes = envelopes
        self._refused: dict[str, str] = {}
        self._failures: list[str] = []
        for recipient in refuse:
            self.refuse(recipient)

    def refuse(self, recipient: str, why: str = "550 5.1.1 no such mailbox") -> None:
        """Refuse every later message to `recipient` permanently."""
        self._refused[recipient.lower()] = why

    def fail_next(self, times: int = 1, why: str = "421 4.3.2 try again later") -> None:
        """Fail the next `times` sends for now (the next hop was busy or unreachable)."""
        self._failures.extend([why] * times)

    def to(self, recipient: str) -> list[bytes]:
        """The messages accepted for `recipient`, in order."""
        return [m.raw for m in self.sent if m.recipient.lower() == recipient.lower()]

    def refusal(self, recipient: str) -> str | None:
        return self._refused.get(recipient.lower())

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        self.attempts += 1
        if self._failures:
            raise TransportError(f"mock: {self._failures.pop(0)}")
        why = self.refusal(recipient)
        if why is not None:
            raise DeliveryRefused(f"mock refused {recipient}: {why}")
        self.sent.append(SentMail(bytes(raw), sender, recipient))

    def open_envelope(self, *, sender: str, recipient: str) -> MockEnvelope | None:
        return MockEnvelope(self, sender, recipient) if self.envelopes else None

    async def close(self) -> None:
        self.closed = True


class MockEnvelope:
    """An early transaction: a refused recipient is told at stage(), before the body."""

    def __init__(self, owner: MockTransport, sender: str, recipient: str) -> None:
        self.owner, self.sender, self.recipient = owner, sender, recipient
        self.staged: bytes | None = None
        self.aborted = False
        self._done = False

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        if self._done:
            return ""
        why = self.owner.refusal(self.recipient)
        if why is not None:
            return f"mock permanent_failure: {why}"
        self.staged = raw
        return ""

    async def send_body(self, raw: bytes) -> None:
        if self._done:
            raise RuntimeError("this envelope was already used")
        self._done = True
        await self.owner.send(raw, self.sender, self.recipient)

    def abort(self) -> None:
        if not self._done:
            self._done = self.aborted = True
