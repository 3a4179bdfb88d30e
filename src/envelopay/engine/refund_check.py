"""The VERIFY_REFUND action (payer side): an OOPS saying our payment went back is believed
only once the rail shows the refund's transfer paid our own wallet its amount in its token
(SPEC.md "Refunds"). Then the flow is `refunded`, with the verdict kept beside the refund;
otherwise the OOPS counts as the plain OOPS it also is, and the flow goes where a plain
OOPS takes it (the refund kept, marked unverified, with the rail's reason)."""

from __future__ import annotations

import logging
from typing import Any

from envelopay import flows
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import Work
from envelopay.flows import Direction, Event, FlowState
from envelopay.protocol.messages import Message
from envelopay.rails.interface import Expectation, Verdict

__all__ = ["check_refund"]

_log = logging.getLogger(__name__)


async def check_refund(message: Message, work: Work, settings: EngineSettings) -> bool:
    """Verify the refund `work`'s step recorded; on failure step the flow as a plain OOPS."""
    refund = dict(work.fs.data.get("refund") or {})
    if work.refund_replayed:  # one transfer cannot be the refund of two payments
        why = {"status": "rejected", "reason": "proof_replayed",
               "detail": "this transfer was already shown for another payment (a refund or a PAY)"}
        return _plain(message, work, {**refund, "verified": False, "verdict": why})
    chain, token = str(refund.get("chain", "")), str(refund.get("token", ""))
    rail, ours = settings.rails.get(chain), settings.wallet(chain, token)
    verdict: Verdict
    if rail is None or ours is None:
        verdict = Verdict.unavailable(f"no rail or wallet of ours for {token} on {chain}")
    else:
        expect = Expectation(chain=chain, token=token, amount=int(refund["amount"]), recipient=ours)
        try:
            verdict = await rail.verify(dict(refund["proof"]), expect)
        except Exception as exc:  # a broken transport: not believed now
            _log.exception("rail %s raised while verifying a refund", chain)
            verdict = Verdict.unavailable(f"rail raised {type(exc).__name__}")
    checked = {**refund, "verified": verdict.ok, "verdict": verdict.to_json()}
    if verdict.ok:
        work.proof_fate = "spend"  # the refund's proof, reserved at the claim: never believed twice
        work.fs = FlowState(work.fs.kind, work.fs.side, work.fs.state, {**work.fs.data, "refund": checked})
        return True
    return _plain(message, work, checked)


def _plain(message: Message, work: Work, checked: dict[str, Any]) -> bool:
    """Not believed: the step of the plain OOPS, the refund kept with why; its proof released."""
    work.proof_fate = "release"
    start = work.start or work.fs
    plain = flows.step(start, message, Direction.IN, Event.OOPS)
    data = {**(plain.data if plain.ok else start.data), "refund": checked}
    work.fs = FlowState(start.kind, start.side, plain.state if plain.ok else start.state, data)
    return False
