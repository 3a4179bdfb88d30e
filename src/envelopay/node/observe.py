"""What handling one inbound message looked like (`Handled`), for the serve log and the
metrics of `worker serve`.

The engine's Outcome says what the step did; a person reading the log also wants the
message's type and sender, and the metrics want how long DKIM and the rail took. Both
come from the engine itself, as values, without a second parse: `Engine.handle_read`
hands back the parse it acted on beside the Outcome, and the Outcome carries the
(chain, seconds) of each rail verification (engine/verify.py timed_verify). Nothing
rides in a context variable: concurrent receives (the Maildir pump and the waiting loop)
each build their own `Handled` from their own values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from envelopay.engine import Outcome
from envelopay.protocol.messages import Message, Offer
from envelopay.protocol.parsed import Parsed

__all__ = ["Handled", "Observer", "Received", "handled"]


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


def handled(
    parsed: Parsed | None, outcome: Outcome, at: datetime, seconds: float, dkim_seconds: float | None
) -> Handled:
    """The Handled of one message: `parsed` as the engine read it (None: a bounce, not
    parsed), its `outcome`, and the time its handling took."""
    message = parsed.message if parsed is not None else None
    return Handled(
        at=at,
        type=parsed.type.value if parsed is not None and parsed.type is not None else None,
        sender=parsed.from_addr.lower() if parsed is not None and parsed.from_addr else None,
        outcome=outcome,
        seconds=seconds,
        dkim_seconds=dkim_seconds,
        proofs=outcome.verify_seconds,
        received=_received(outcome, message),
    )


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
