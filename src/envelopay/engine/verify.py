"""The VerifyProof action: one rail verification, and the earliest transfer it may accept.

A Verdict is a value; a rail that raises is a bug or a broken transport, so the proof
is left unjudged (retry later, never spent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from envelopay.engine.records import INVOICE_ISSUED_AT, Work
from envelopay.flows import Step
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, Offer, Pay
from envelopay.rails.interface import Expectation, Rail, Verdict

__all__ = ["not_before", "verify_proof"]

_log = logging.getLogger(__name__)


async def verify_proof(
    message: Message,
    step: Step,
    work: Work,
    *,
    rails: Mapping[str, Rail],
    wallet: Callable[[str, str], str | None],
    clock: Callable[[], datetime],
    proof_window: timedelta | None,
    invoice_skew: timedelta | None,
) -> tuple[OopsCode, str] | None:
    """The VerifyProof action: ask the rail, record the verdict and the proof's fate on
    `work`; None when the proof pays, else the OOPS code and detail."""
    check = step.proof
    assert check is not None
    rail = rails.get(check.chain)
    if rail is None:
        return OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {check.chain!r}"
    ours = wallet(check.chain, check.token)
    recipient = check.recipient
    if recipient is None:
        if ours is None:
            return OopsCode.UNSUPPORTED_RAIL, f"we take no {check.token} on {check.chain}"
        recipient = ours
    elif isinstance(message, Offer) and recipient != ours:
        # The give leg must have paid us, not someone else.
        return OopsCode.RECIPIENT_MISMATCH, "the OFFER's give leg did not pay our wallet"
    now = clock()
    expectation = Expectation(
        chain=check.chain,
        token=check.token,
        amount=check.amount,
        recipient=recipient,
        not_before=not_before(message, work.fs.data, now, proof_window, invoice_skew),
    )
    try:
        verdict = await rail.verify(check.proof, expectation)
    except Exception as exc:  # a rail bug or a broken transport: retry later, never spend
        _log.exception("rail %s raised while verifying", rail.name)
        verdict = Verdict.unavailable(f"rail raised {type(exc).__name__}")
    work.verdict = verdict
    if verdict.ok:
        work.proof_fate = "spend"
        return None
    if verdict.status in ("pending", "unavailable"):
        # Not judged: the proof may be presented again, and so may the (sender, id).
        work.proof_fate = "release"
        work.replay_fate = "release"
    else:
        work.proof_fate = "spend"  # a rejected proof stays spent
    code = verdict.oops or OopsCode.RAIL_UNAVAILABLE
    return code, verdict.detail or code.value


def not_before(
    message: Message,
    data: Mapping[str, Any],
    now: datetime,
    proof_window: timedelta | None,
    invoice_skew: timedelta | None,
) -> datetime | None:
    """The earliest transaction time a proof may carry.

    A PAY that settles an INVOICE must be a transfer made after the INVOICE was
    issued (less `invoice_skew` for clock drift between us and the chain): an older
    transfer to the same wallet for the same amount, never claimed by mail, must not
    pay a new INVOICE. `proof_window` optionally bounds every proof's age."""
    bounds: list[datetime] = []
    if proof_window is not None:
        bounds.append(now - proof_window)
    issued = data.get(INVOICE_ISSUED_AT)
    if isinstance(message, Pay) and invoice_skew is not None and isinstance(issued, str):
        bounds.append(datetime.fromisoformat(issued) - invoice_skew)
    return max(bounds) if bounds else None
