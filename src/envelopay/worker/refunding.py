"""The worker's answer to money it cannot use (engine/unusable.py asks): an underpaid or
otherwise refused PAY is refunded in full; an overpayment's excess above the operator's
tolerance (`[refunds] overpay_tolerance`) is returned; an OFFER's give leg refused after it
verified goes back in full. Keyed by the proof (`pay:<chain>:<proof key>`), so a redo of
the step pays nothing twice (envelopay.worker.refunds)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from envelopay.engine import Context
from envelopay.engine.unusable import Unusable
from envelopay.ledger.refunds import RefundOrder
from envelopay.protocol.messages import Offer, Order
from envelopay.worker.refunds import Refunder, refund_fields

__all__ = ["RefundsMoney", "excess_kept", "parse_tolerance"]


def parse_tolerance(text: str) -> tuple[int, Decimal]:
    """`overpay_tolerance`: smallest units ("2500") or a share of the price ("1%"); (units,
    fraction), one of them 0. ValueError for anything else."""
    t = text.strip()
    try:
        if t.endswith("%"):
            share = Decimal(t[:-1]) / 100
            if not share.is_finite() or not 0 <= share <= 1:
                raise ValueError
            return 0, share
        if t.isascii() and t.isdigit() and len(t) <= 78:
            return int(t), Decimal(0)
    except (InvalidOperation, ValueError):
        pass
    raise ValueError(f"overpay_tolerance {text!r}: smallest units (\"2500\") or a percentage (\"1%\")")


def excess_kept(excess: int, price: int, tolerance: str) -> bool:
    """Is an overpayment's excess within the tolerance (kept, not returned)?"""
    units, share = parse_tolerance(tolerance)
    return excess <= units or Decimal(excess) <= share * price


class RefundsMoney:
    """Mixed into the worker's Application: `refunder` set by the wiring (None: no refunds,
    the money stays as before)."""

    refunder: Refunder | None = None
    overpay_tolerance: str = "0"

    async def refund_unusable(self, money: Unusable) -> Mapping[str, Any] | None:
        if self.refunder is None or not self.refunder.payer.can_pay(money.chain):
            return None  # no key to pay back with: refused as before, the money stays
        if money.reason == "overpaid" and excess_kept(money.amount, money.expected, self.overpay_tolerance):
            return None
        m = money
        order = RefundOrder(
            key=_key(m), local=m.local, peer=m.peer, flow_id=m.flow_id, chain=m.chain,
            token=m.token, amount=m.amount, recipient=m.payer, reason=m.reason,
        )
        result = await self.refunder.refund(order)
        if result.refund is None:
            return None
        return refund_fields(result.refund, result.status)

    async def refund_prepaid(
        self, order: Order, ctx: Context, amount: int, price: int, reason: str
    ) -> Mapping[str, Any] | None:
        """A prepaid ORDER's money we cannot use: all of it when it paid less than the price
        (`amount_mismatch`), the excess over the price (`overpaid`). The engine verified its
        proof (`ctx.verdict`: the payer wallet and the proof's key)."""
        v = ctx.verdict
        if v is None or not v.ok or not v.payer or order.proof is None or amount <= 0:
            return None
        # The rail's canonical key when it names one; else the proof as presented (the engine
        # reserved this transfer's own key for this message, so no other spelling gets here).
        key = v.proof_key or json.dumps(order.proof, sort_keys=True, separators=(",", ":"))
        money = Unusable(local=ctx.local, peer=ctx.peer, flow_id=ctx.flow_id, chain=order.chain or "",
                         token=order.token or "", amount=amount, expected=price, payer=v.payer,
                         proof=order.proof, proof_key=key, reason=reason)
        return await self.refund_unusable(money)

    async def refund_offer(self, offer: Offer, ctx: Context) -> Mapping[str, Any] | None:
        """An OFFER refused after its give leg verified (the pair or rate, the counter-leg
        refused, no wallet to pay from): all the give leg paid goes back to the wallet that
        paid it (`ctx.verdict`), keyed by its proof like any money we cannot use. The
        caller never asks for a counter-leg in doubt: that one may have paid."""
        money = _give_leg(offer, ctx)
        return None if money is None else await self.refund_unusable(money)

    def give_leg_refunded(self, offer: Offer, ctx: Context) -> bool:
        """Has this OFFER's give leg begun to go back? (A redo of the step after a crash
        before its commit: then the counter-leg is never paid too, whatever changed since.)"""
        money = _give_leg(offer, ctx)
        if self.refunder is None or money is None:
            return False
        return self.refunder.book.get(_key(money)) is not None


def _key(money: Unusable) -> str:
    return f"pay:{money.chain}:{money.proof_key}"


def _give_leg(offer: Offer, ctx: Context) -> Unusable | None:
    """An OFFER's give leg as the engine verified it, all of it, as money to give back."""
    v, give = ctx.verdict, offer.give
    if v is None or not v.ok or not v.payer:
        return None
    paid = v.observed_amount if v.observed_amount is not None else give.amount
    key = v.proof_key or json.dumps(give.proof, sort_keys=True, separators=(",", ":"))
    return Unusable(local=ctx.local, peer=ctx.peer, flow_id=ctx.flow_id, chain=give.chain, token=give.token,
                    amount=paid, expected=give.amount, payer=v.payer, proof=give.proof, proof_key=key,
                    reason="offer_refused")

