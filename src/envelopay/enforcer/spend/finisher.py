"""Finishing in-flight payments while the enforcer serves.

A payment call returns as soon as it knows no more now: a transaction the chain has not
confirmed yet (`BROADCAST`, "not yet confirmed"), or money moved whose PAY the payee's
server has not taken yet (`PAID`: a 4xx such as greylisting, a server down, a 5xx a
later retry may clear). Recovery at start and `check_payment_status` finish such an
intent, but an agent that never asks again would leave the payee unpaid-for in its
inbox: the money moved, the email that proves it stuck. So `enforcer serve` runs this
pass every `interval` seconds. Each intent it could not finish waits twice as long
before its next try (from `interval` up to `max_wait`), so a greylisting server is
asked again at 5, 10, 20 … seconds, not hammered.

What it drives is what recovery drives (payments_exec.run, not live: the wallet lock,
the recorded state re-read, the chain asked first, the PAY with its fixed Message-ID),
so it adds no new way to pay or send: at most once for the money, at least once for the
email, as before. An intent this process is executing is skipped. Another enforcer
process on the same store may be executing one too: its PAY is delivered only by the
process recorded as its deliverer while that one lives (payments_exec.run,
enforcer/common/liveness.py), and its money steps go through the wallet lock and conditional
transitions that make a stale step a no-op. Besides, so as not to do a live call's work
beside it, an unfinished intent is taken only `settle` seconds after its call made it (the
call has returned by then), and one in `RESERVED`, `SIGNED` or `APPROVED` only `grace`
seconds after it was made or approved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from envelopay.enforcer.spend.intent import IN_FLIGHT
from envelopay.enforcer.spend.parts import PaymentParts
from envelopay.enforcer.spend.payments_exec import execute, run
from envelopay.errors import StoreError, TransportError

if TYPE_CHECKING:
    from envelopay.enforcer.spend.intent import Intent

__all__ = ["Finisher"]

log = logging.getLogger("envelopay.enforcer")

_UNFINISHED = ("BROADCAST", "PAID")  # money may have moved: nothing else can advance them
_MAYBE_LIVE = ("RESERVED", "SIGNED", "APPROVED")  # another process may be executing these


@dataclass
class Finisher:
    payments: PaymentParts
    interval: float = 5.0
    max_wait: float = 300.0
    settle: float = 20.0
    grace: float = 60.0
    _due: dict[str, tuple[float, float]] = field(default_factory=dict)  # id → (next try, wait)

    def _left_alone(self, i: Intent, now: float) -> bool:
        """Whether no live call (of another process: this one's are in `_active`) can
        still be driving `i`: its call returns within `settle` seconds of making it, an
        approval's execution within `grace` of the decision."""
        since = i.decided_at if i.state == "APPROVED" and i.decided_at is not None else i.created_at
        if i.state in _UNFINISHED:
            return now - since >= self.settle
        return i.state in _MAYBE_LIVE and now - since >= self.grace

    async def once(self) -> int:
        """One pass over the in-flight intents; how many it tried."""
        p = self.payments
        now = p.clock()
        flying = await p.store.in_flight()
        live = {i.id for i in flying}
        for gone in [k for k in self._due if k not in live]:
            del self._due[gone]
        tried = 0
        for i in flying:
            if i.id in p._active or not self._left_alone(i, now):
                continue
            at, wait = self._due.get(i.id, (0.0, self.interval))
            if now < at:
                continue
            tried += 1
            if i.state == "APPROVED":
                await execute(p, i.id)
            else:
                await run(p, i.id, live=False)
            after = await p.store.get(i.id)
            if after is not None and (after.state == "APPROVED" or after.state in IN_FLIGHT):
                self._due[i.id] = (p.clock() + wait, min(wait * 2, self.max_wait))
            else:
                self._due.pop(i.id, None)
        return tried

    async def serve(self, stop: asyncio.Event) -> None:
        """Passes every `interval` seconds until `stop` is set."""
        while not stop.is_set():
            try:
                await self.once()
            except (StoreError, TransportError) as exc:  # the next pass tries again
                log.warning("finishing in-flight payments: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.interval)
