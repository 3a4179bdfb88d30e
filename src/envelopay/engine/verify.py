"""The VerifyProof action: the proof's binding, one rail verification, and the earliest
transfer it may accept.

A proof is bound to the presentation by the payer's signature (envelopay.rails.binding;
SPEC.md "Proof binding"): the signing wallet becomes the Expectation's payer, so the
rail also checks that this wallet authorised the transfer. An unbound proof pays only
a PAY against our INVOICE or an ACCEPT of our OFFER (v0.1 interop, `proof_binding`
"solicited"); with "required", never. A proof whose presentation fails is released
(never spent) unless it was bound to the presenter, so nobody can burn someone
else's transfer by presenting it wrongly.

A Verdict is a value; a rail that raises is a bug or a broken transport, so the proof
is left unjudged (retry later, never spent). Every rail.verify the inbound path makes goes
through `timed_verify`, which keeps its (chain, seconds) on the step's Work: the Outcome
carries them to worker serve's metrics (node/observe.py), no side channel.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from envelopay.engine.settings import EngineSettings, ProofBinding
from envelopay.engine.step_facts import INVOICE_ISSUED_AT, Work
from envelopay.flows import ProofCheck, Step
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Accept, Message, Offer, Pay
from envelopay.rails.binding import BindingRail, declared_binding, statement
from envelopay.rails.interface import Expectation, Rail, Reason, Verdict

__all__ = ["ProofBinding", "binding_check", "not_before", "timed_verify", "verify_proof"]

_log = logging.getLogger(__name__)


async def timed_verify(rail: Rail, proof: dict[str, Any], expectation: Expectation, work: Work) -> Verdict:
    """`rail.verify`, its (chain, seconds) kept on `work` (raised or not, as it took the time)."""
    started = time.perf_counter()
    try:
        return await rail.verify(proof, expectation)
    finally:
        work.verify_seconds.append((expectation.chain, time.perf_counter() - started))


async def verify_proof(
    message: Message, step: Step, work: Work, settings: EngineSettings, proof_key: str | None
) -> tuple[OopsCode, str] | None:
    """The VerifyProof action: check the binding, ask the rail, record the verdict and
    the proof's fate on `work`; None when the proof pays, else the OOPS code and detail."""
    check = step.proof
    assert check is not None
    rail = settings.rails.get(check.chain)
    if rail is None:
        return OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {check.chain!r}"
    payer, refused = binding_check(message, work, rail, settings, check, proof_key)
    if refused is not None:
        work.proof_fate = "release"  # not the presenter's to burn
        return refused
    ours = settings.wallet(check.chain, check.token)
    recipient = check.recipient
    if recipient is None:
        if ours is None:
            return OopsCode.UNSUPPORTED_RAIL, f"we take no {check.token} on {check.chain}"
        recipient = ours
    elif isinstance(message, Offer) and recipient != ours:
        # The give leg must have paid us, not someone else.
        return OopsCode.RECIPIENT_MISMATCH, "the OFFER's give leg did not pay our wallet"
    now = settings.clock()
    expectation = Expectation(
        chain=check.chain,
        token=check.token,
        amount=check.amount,
        recipient=recipient,
        payer=payer,
        not_before=not_before(message, work.fs.data, now, settings.proof_window, settings.invoice_skew),
    )
    try:
        verdict = await timed_verify(rail, check.proof, expectation, work)
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
    elif payer is not None and verdict.reason is not Reason.PAYER_MISMATCH:
        work.proof_fate = "spend"  # rejected, and shown to be the presenter's: stays spent
    else:
        work.proof_fate = "release"  # rejected, and nobody showed it is theirs
    code = verdict.oops or OopsCode.RAIL_UNAVAILABLE
    return code, verdict.detail or code.value


def _solicited(message: Message, data: Mapping[str, Any]) -> bool:
    """A PAY settling the INVOICE we issued in this flow, or an ACCEPT of our OFFER: the
    amount and the moment were ours to name (the v0.1 flows)."""
    if isinstance(message, Pay):
        return isinstance(data.get(INVOICE_ISSUED_AT), str)
    return isinstance(message, Accept)


def binding_check(
    message: Message, work: Work, rail: Rail, settings: EngineSettings, check: ProofCheck, key: str | None
) -> tuple[str | None, tuple[OopsCode, str] | None]:
    """(the payer wallet the rail must see authorise the transfer, or None for an
    accepted unbound proof; the refusal when the binding is missing or wrong)."""
    declared = declared_binding(check.proof)
    pid = getattr(message, "id", None)
    if declared is not None and isinstance(rail, BindingRail) and key is not None and isinstance(pid, str):
        wallet, sig = declared
        said = statement(payee=settings.address, payer=work.peer, message_id=pid, chain=check.chain, tx=key)
        if not rail.check_payer_sig(wallet, said, sig):
            detail = "payer_sig is not the payer wallet's signature of this presentation"
            return None, (OopsCode.PAYER_MISMATCH, detail)
        return wallet, None
    if settings.proof_binding == "solicited" and _solicited(message, work.fs.data):
        return None, None
    return None, (
        OopsCode.PAYER_MISMATCH,
        "unbound proof: add payer and payer_sig to the proof (binding payer_sig, see SPEC.md)",
    )


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
