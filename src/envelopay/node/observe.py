"""What handling one inbound message looked like (`Handled`), for the serve log and the
metrics of `worker serve`.

The engine's Outcome says what the step did; a person reading the log also wants the
message's type and sender, and the metrics want how long DKIM and the rail took. Both
come from the engine's own seams, without a second parse: the Engine's injectable
parser is tapped (`tap_parser`) and its rails are timed (`timed_rail`). Each records
into the `Seen` of the message being handled, found through a ContextVar that
`AgentNode.receive` sets, so concurrent receives (the Maildir pump and the waiting
loop) never see each other's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envelopay.engine import Outcome
from envelopay.protocol.messages import Message, Offer
from envelopay.protocol.parsed import Parsed
from envelopay.rails.binding import BindingRail
from envelopay.rails.interface import AssetInfo, Expectation, Rail, Verdict

__all__ = ["Handled", "Observer", "Received", "Seen", "tap_parser", "timed_rail"]


@dataclass(frozen=True, slots=True)
class Received:
    """Money a processed message brought in: its rail, asset and smallest units."""

    chain: str
    token: str
    amount: int


@dataclass(frozen=True, slots=True)
class Handled:
    """One inbound message, handled: what the log line and the metrics are made of."""

    at: datetime  # when handling ended
    type: str | None  # the subject keyword, lowercase ("pay"); None: not protocol mail, a bounce
    sender: str | None
    outcome: Outcome
    seconds: float  # DKIM verification and the engine's step (not the reply's delivery)
    dkim_seconds: float | None  # None when no DKIM check ran (dkim_policy "off")
    proofs: tuple[tuple[str, float], ...] = ()  # (chain, seconds) of each rail verification
    received: Received | None = None


Observer = Callable[[Handled], None]


@dataclass(slots=True)
class Seen:
    """Filled in while one message is handled (by the tapped parser and timed rails)."""

    parsed: Parsed | None = None
    proofs: list[tuple[str, float]] = field(default_factory=list)

    def handled(self, outcome: Outcome, at: datetime, seconds: float, dkim_seconds: float | None) -> Handled:
        parsed = self.parsed
        message = parsed.message if parsed is not None else None
        return Handled(
            at=at,
            type=parsed.type.value if parsed is not None and parsed.type is not None else None,
            sender=parsed.from_addr.lower() if parsed is not None and parsed.from_addr else None,
            outcome=outcome,
            seconds=seconds,
            dkim_seconds=dkim_seconds,
            proofs=tuple(self.proofs),
            received=_received(outcome, message),
        )


CURRENT: ContextVar[Seen | None] = ContextVar("envelopay_seen", default=None)


def tap_parser(parse: Callable[[bytes], Parsed]) -> Callable[[bytes], Parsed]:
    """`parse`, also handing its result to the message being handled."""

    def tapped(raw: bytes) -> Parsed:
        parsed = parse(raw)
        seen = CURRENT.get()
        if seen is not None:
            seen.parsed = parsed
        return parsed

    return tapped


def _received(outcome: Outcome, message: Message | None) -> Received | None:
    """The money of a processed step whose proof the rail accepted. A recorded outcome
    handed back again (a redelivery) brought nothing new."""
    verdict = outcome.verdict
    if outcome.status != "processed" or outcome.repeat is not None or message is None:
        return None
    if verdict is None or verdict.get("status") != "ok":
        return None
    leg: Any = message.give if isinstance(message, Offer) else message
    chain, token = getattr(leg, "chain", None), getattr(leg, "token", None)
    observed = verdict.get("observed_amount")
    amount = observed if isinstance(observed, str) and observed.isascii() and observed.isdigit() else None
    if amount is None:
        amount = getattr(leg, "amount", None)
    if not isinstance(chain, str) or not isinstance(token, str) or amount is None:
        return None
    return Received(chain, token, int(amount))


class TimedRail:
    """A rail whose `verify` is timed into the message being handled; everything else is
    the rail's own. The Rail members are spelled out (not only __getattr__): Python 3.12
    checks runtime protocols with getattr_static."""

    def __init__(self, rail: Rail) -> None:
        self.rail = rail
        self.name = rail.name

    def __getattr__(self, name: str) -> Any:  # aclose, and whatever else a rail offers
        return getattr(self.rail, name)

    @property
    def chains(self) -> tuple[str, ...]:
        return self.rail.chains

    def assets(self) -> tuple[AssetInfo, ...]:
        return self.rail.assets()

    def proof_key(self, proof: dict[str, Any]) -> str:
        return self.rail.proof_key(proof)

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        started = time.perf_counter()
        try:
            return await self.rail.verify(proof, expectation)
        finally:
            seen = CURRENT.get()
            if seen is not None:
                seen.proofs.append((expectation.chain, time.perf_counter() - started))

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        return await self.rail.pay(chain=chain, token=token, amount=amount, recipient=recipient)


class TimedBindingRail(TimedRail):
    """A timed rail that also signs and checks bindings (the engine asks isinstance)."""

    def __init__(self, rail: Rail) -> None:
        super().__init__(rail)
        assert isinstance(rail, BindingRail)
        self.binding = rail

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        return self.binding.sign_statement(message)

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        return self.binding.check_payer_sig(payer, message, signature)


def timed_rail(rail: Rail) -> Rail:
    if isinstance(rail, TimedRail):
        return rail
    return TimedBindingRail(rail) if isinstance(rail, BindingRail) else TimedRail(rail)
