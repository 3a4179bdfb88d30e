"""The VERIFY_REFUND action (payer side): an OOPS saying our payment went back is believed
only once the rail shows the refund's transfer paid our own wallet its amount in its token
(SPEC.md "Refunds"). Then the flow is `refunded`, with the verdict kept beside the refund;
otherwise the OOPS counts as the plain OOPS it also is, and the flow goes where a plain
OOPS takes it (the refund kept, marked unverified, with the rail's reason).
VERIFY_EXCESS checks a FULFILL's overpayment excess the same way and keeps it as the
flow's `excess`; the FULFILL's state stands either way."""

from __future__ import annotations

import logging
from typing import Any

from envelopay import flows
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import Work
from envelopay.engine.verify import timed_verify
from envelopay.flows import Direction, Event, FlowState
from envelopay.flows.core import excess_of
from envelopay.protocol.messages import Message
from envelopay.rails.interface import Expectation, Verdict

__all__ = ["check_excess", "check_refund"]

_log = logging.getLogger(__name__)


_REPLAYED = {"status": "rejected", "reason": "proof_replayed",
             "detail": "this transfer was already shown for another payment (a refund or a PAY)"}


async def check_refund(message: Message, work: Work, settings: EngineSettings) -> bool:
    """Verify the refund `work`'s step recorded; on failure step the flow as a plain OOPS."""
    refund = dict(work.fs.data.get("refund") or {})
    if work.refund_replayed:  # one transfer cannot be the refund of two payments
        return _plain(message, work, {**refund, "verified": False, "verdict": _REPLAYED})
    verdict = await _verdict(refund, settings, work)
    checked = {**refund, "verified": verdict.ok, "verdict": verdict.to_json()}
    if verdict.ok:
        work.proof_fate = "spend"  # the refund's proof, reserved at the claim: never believed twice
        work.fs = FlowState(work.fs.kind, work.fs.side, work.fs.state, {**work.fs.data, "refund": checked})
        return True
    return _plain(message, work, checked)


async def check_excess(message: Message, work: Work, settings: EngineSettings) -> None:
    """A FULFILL saying an overpayment's excess went back (`refund`): checked as a refund is,
    kept in the flow's data as `excess` with its verdict; the flow's state is the FULFILL's
    either way (the work is done)."""
    excess = excess_of(message)
    if excess is None:
        return
    if work.refund_replayed:  # one transfer cannot be the refund of two payments
        ok, verdict = False, _REPLAYED
    else:
        checked = await _verdict(excess, settings, work)
        ok, verdict = checked.ok, checked.to_json()
    work.proof_fate = "spend" if ok else "release"  # reserved at the claim: believed once
    data = {**work.fs.data, "excess": {**excess, "verified": ok, "verdict": verdict}}
    work.fs = FlowState(work.fs.kind, work.fs.side, work.fs.state, data)


async def _verdict(refund: dict[str, Any], settings: EngineSettings, work: Work) -> Verdict:
    """Did the rail see `refund`'s transfer pay our own wallet its amount in its token?"""
    chain, token = str(refund.get("chain", "")), str(refund.get("token", ""))
    rail, ours = settings.rails.get(chain), settings.wallet(chain, token)
    verdict: Verdict
    if rail is None or ours is None:
        verdict = Verdict.unavailable(f"no rail or wallet of ours for {token} on {chain}")
    else:
        expect = Expectation(chain=chain, token=token, amount=int(refund["amount"]), recipient=ours)
        try:
            verdict = await timed_verify(rail, dict(refund["proof"]), expect, work)
        except Exception as exc:  # a broken transport: not believed now
            _log.exception("rail %s raised while verifying a refund", chain)
            verdict = Verdict.unavailable(f"rail raised {type(exc).__name__}")
    return verdict


def _plain(message: Message, work: Work, checked: dict[str, Any]) -> bool:
    """Not believed: the step of the plain OOPS, the refund kept with why; its proof released."""
    work.proof_fate = "release"
    start = work.start or work.fs
    plain = flows.step(start, message, Direction.IN, Event.OOPS)
    data = {**(plain.data if plain.ok else start.data), "refund": checked}
    work.fs = FlowState(start.kind, start.side, plain.state if plain.ok else start.state, data)
    return False
