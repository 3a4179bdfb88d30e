"""Waiting for a chain: how long a worker keeps a not-yet-final proof, and how a payer
waits for its own transaction before presenting it.

`WaitPolicy` is pure (no clock of its own): given when a proof was first seen, how many
times it was looked at and now, it says when to look again, or that the window is
over. The default windows cover each chain's finality plus margin: Solana finalizes
in ~13 s (32 slots of 400 ms), Base's default depth of 2 blocks takes ~4 s; an unknown
chain gets the longest.

`wait_final` is the payer side: it re-verifies its own proof against the expectation
the counterparty will apply until the verdict is no longer `pending`, reporting
progress (depth reached) to a callback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from envelopay.rails.interface import Expectation, Rail, Verdict

__all__ = ["DEFAULT_WINDOWS", "WaitPolicy", "progress_text", "wait_final"]

# Seconds a worker waits for a proof to become final, by chain family (the rail name).
DEFAULT_WINDOWS: Mapping[str, float] = {"solana": 60.0, "base": 120.0}
FALLBACK_WINDOW = 120.0
# The longest pause between looks, by chain family: a quarter of a Solana slot (400 ms),
# so a commitment reached between two looks is seen within 100 ms; other chains `cap`.
DEFAULT_CAPS: Mapping[str, float] = {"solana": 0.1}
DEFAULT_CAP = 0.2


@dataclass(frozen=True, slots=True)
class WaitPolicy:
    """Capped exponential backoff inside a per-chain window (seconds)."""

    windows: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_WINDOWS))
    fallback: float = FALLBACK_WINDOW
    first: float = 0.05  # the first look again, after the first verdict
    factor: float = 2.0
    cap: float = DEFAULT_CAP  # never wait longer than this between looks: the added latency is bounded by it
    caps: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CAPS))  # per chain or family

    def __post_init__(self) -> None:
        if self.first <= 0 or self.factor < 1 or any(c < self.first for c in (self.cap, *self.caps.values())):
            raise ValueError("wait policy: first > 0, factor >= 1, cap >= first")
        if self.fallback < 0 or any(v < 0 for v in self.windows.values()):
            raise ValueError("wait policy: windows are seconds >= 0")

    def window(self, chain: str) -> timedelta:
        return timedelta(seconds=_by_chain(self.windows, chain, self.fallback))

    def delay(self, attempts: int, chain: str | None = None) -> timedelta:
        """The pause after the `attempts`-th look (1 = after the first) on `chain`."""
        cap = self.cap if chain is None else _by_chain(self.caps, chain, self.cap)
        return timedelta(seconds=min(cap, self.first * self.factor ** max(0, attempts - 1)))

    def next_look(self, chain: str, first_seen: datetime, attempts: int, now: datetime) -> datetime | None:
        """When to look again, or None when the window is over (answer the verdict now)."""
        deadline = first_seen + self.window(chain)
        if now >= deadline:
            return None
        return min(now + self.delay(attempts, chain), deadline)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> WaitPolicy:
        """From a config table: window (all chains) or window_<chain>, cap (all chains) or
        cap_<chain>, first, factor."""
        windows, fallback = _per_chain(options, "window", DEFAULT_WINDOWS, FALLBACK_WINDOW)
        caps, cap = _per_chain(options, "cap", DEFAULT_CAPS, DEFAULT_CAP)
        kw = {k: float(options[k]) for k in ("first", "factor") if k in options}
        return cls(windows=windows, fallback=fallback, cap=cap, caps=caps, **kw)


def _by_chain(values: Mapping[str, float], chain: str, default: float) -> float:
    """The value for `chain` ("solana-local"), else for its family ("solana"), else `default`."""
    return values.get(chain, values.get(chain.split("-", 1)[0], default))


def _per_chain(options: Mapping[str, Any], name: str, defaults: Mapping[str, float],
               fallback: float) -> tuple[dict[str, float], float]:
    """`name` sets every chain; `name_<chain>` one chain or family (underscores for dashes)."""
    values = dict(defaults)
    if name in options:
        fallback = float(options[name])
        values = {k: fallback for k in values}
    for key, value in options.items():
        if key.startswith(f"{name}_"):
            values[key.removeprefix(f"{name}_").replace("_", "-")] = float(value)
    return values, fallback


def progress_text(verdict: Verdict, expectation: Expectation) -> str:
    """One line saying how far a pending payment got (slot commitment or block depth)."""
    depth = verdict.extra.get("confirmations")
    if isinstance(depth, int):
        return f"{depth} of {expectation.confirmations} confirmations"
    return verdict.detail or verdict.status


async def wait_final(
    rail: Rail,
    proof: dict[str, Any],
    expectation: Expectation,
    *,
    timeout: float = 120.0,
    poll: float = 0.1,
    progress: Callable[[str], Any] | None = None,
) -> Verdict:
    """Re-verify our own proof until it is no longer pending (or `timeout` passes: the
    last verdict is returned, still pending). `unavailable` is retried the same way."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    said = ""
    while True:
        verdict = await rail.verify(proof, expectation)
        if verdict.status not in ("pending", "unavailable"):
            return verdict
        line = progress_text(verdict, expectation)
        if progress is not None and line != said:
            progress(line)
            said = line
        if loop.time() >= deadline:
            return verdict
        await asyncio.sleep(poll)
