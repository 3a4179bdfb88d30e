"""Money the worker cannot use: a PAY refused for its amount whose transfer did reach us.

A PAY that says less than its INVOICE asks is refused by the flow's table before its proof
is read; a PAY whose transfer paid other than it says is refused by the rail
(amount_mismatch). Either way the money, if it moved, is ours and buys nothing. The
engine asks the rail what the transfer paid and from which wallet, and hands that to an
application that refunds (`RefundsUnusable`, the worker); the OOPS amount_mismatch then
carries the refund (SPEC.md "Refunds"). The proof is spent: the money went back, and the
same transfer can never pay anything again. An application that does not refund, or a
proof that shows no transfer to us, leaves the refusal as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import Work
from envelopay.engine.verify import not_before, timed_verify
from envelopay.protocol.messages import Message, Pay
from envelopay.rails.interface import Expectation, Reason

__all__ = ["RefundsUnusable", "Unusable", "refund_excess", "refund_unusable"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Unusable:
    """A transfer to us we refuse: `amount` (what it paid) of `token` on `chain` from
    the wallet `payer`, presented in `peer`'s flow; `expected` is what the INVOICE asked."""

    local: str
    peer: str
    flow_id: str
    chain: str
    token: str
    amount: int
    expected: int
    payer: str
    proof: Mapping[str, Any]
    proof_key: str
    # "amount_mismatch": the PAY was refused, all of `amount` is to go back; "overpaid":
    # the PAY was accepted and `amount` is the excess over `expected`.
    reason: str = "amount_mismatch"


@runtime_checkable
class RefundsUnusable(Protocol):
    async def refund_unusable(self, money: Unusable) -> Mapping[str, Any] | None:
        """Pay `money` back (at most once, keyed by its proof); the OOPS extension fields
        ({"refund": {...}}), or None when nothing was paid back."""
        ...


async def refund_unusable(
    message: Message, work: Work, settings: EngineSettings, proof_key: str | None, now: datetime
) -> Mapping[str, Any] | None:
    """For a PAY refused for its amount: the refund's OOPS fields (and the proof spent), or None."""
    app = settings.app
    if not isinstance(message, Pay) or not isinstance(app, RefundsUnusable) or proof_key is None:
        return None
    data = (work.start or work.fs).data
    invoice = data.get("invoice")
    rail, ours = settings.rails.get(message.chain), settings.wallet(message.chain, message.token)
    if not isinstance(invoice, Mapping) or rail is None or ours is None:
        return None
    verdict = work.verdict
    # What the transfer paid: the rail saw it (amount_mismatch), or the PAY says it.
    mismatch = verdict is not None and verdict.reason is Reason.AMOUNT_MISMATCH
    seen = verdict.observed_amount if verdict is not None and mismatch else None
    paid = seen if seen is not None else message.amount
    expect = Expectation(chain=message.chain, token=message.token, amount=paid, recipient=ours,
                         not_before=not_before(message, data, now, settings.proof_window,
                                               settings.invoice_skew))
    try:
        shown = await timed_verify(rail, message.proof, expect, work)
    except Exception:  # a broken transport: refuse as before; a redelivery may refund
        _log.exception("rail %s raised while reading an unusable payment", rail.name)
        return None
    if not shown.ok or not shown.payer or paid <= 0:
        return None
    money = Unusable(local=settings.address, peer=work.peer, flow_id=work.flow_id, chain=message.chain,
                     token=message.token, amount=paid, expected=int(invoice.get("amount", 0)),
                     payer=shown.payer, proof=message.proof, proof_key=proof_key)
    fields = await app.refund_unusable(money)
    if fields:
        work.proof_fate = "spend"  # paid back: this transfer never pays again
    return fields


async def refund_excess(
    message: Message, work: Work, settings: EngineSettings, proof_key: str | None
) -> None:
    """For a PAY accepted for more than its INVOICE asks: the excess offered back to the
    application (which returns it above the operator's tolerance); what went back is kept in
    the flow's data (`refund`), beside the payment it belongs to."""
    verdict, app = work.verdict, settings.app
    if not isinstance(message, Pay) or not isinstance(app, RefundsUnusable) or proof_key is None:
        return
    invoice = work.fs.data.get("invoice")
    if verdict is None or not verdict.ok or not verdict.payer or not isinstance(invoice, Mapping):
        return
    paid, asked = verdict.observed_amount or message.amount, int(invoice.get("amount", 0))
    if paid <= asked:
        return
    money = Unusable(local=settings.address, peer=work.peer, flow_id=work.flow_id, chain=message.chain,
                     token=message.token, amount=paid - asked, expected=asked, payer=verdict.payer,
                     proof=message.proof, proof_key=proof_key, reason="overpaid")
    fields = await app.refund_unusable(money)
    if fields and isinstance(fields.get("refund"), Mapping):
        work.fs = replace(work.fs, data={**work.fs.data, "refund": dict(fields["refund"])})
