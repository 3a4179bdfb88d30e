"""The email leg of an enforced payment as a protocol message: PAY, OFFER, ACCEPT or a
prepaid ORDER, built from protocol.messages (the models every sender composes) and bound
to its payer by rails.binding.bind_message (the function the engine's send path uses).

Pure: no store, no vault, no network. payments.py builds the leg with a placeholder proof
when the intent is made (so the send checks see the message the call will send);
payments_exec.py puts the real proof in and binds it with the wallet's key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from envelopay.enforcer.spend.policy import PaymentRequest
from envelopay.protocol.messages import (
    Accept,
    Give,
    Message,
    MessageType,
    Offer,
    Order,
    Pay,
    Want,
    model_for,
)
from envelopay.rails.binding import StatementSigner, bind_message, is_bound

__all__ = ["PLACEHOLDER_PROOF", "PREPAID_VERSION", "bound_leg", "leg_message"]

PLACEHOLDER_PROOF: dict[str, Any] = {"tx": "pending"}
PREPAID_VERSION = "0.2.0"  # the prepaid ORDER fields exist from v0.2 (SPEC "Versions")


def leg_message(
    req: PaymentRequest, own_wallet: str, proof: Mapping[str, Any] = PLACEHOLDER_PROOF
) -> Message:
    """The message that carries the payment `req` describes. `own_wallet` is the agent's
    wallet on the payment's chain (an OFFER names where the want leg is paid)."""
    p = dict(proof)
    if req.kind == "accept":
        return Accept(id=req.msg_id, offer_ref=req.offer_ref, amount=req.amount, token=req.token,
                      chain=req.chain, proof=p, note=req.note)
    if req.kind == "offer":
        want = dict(req.want or {})
        return Offer(
            id=req.msg_id,
            give=Give(amount=req.amount, token=req.token, chain=req.chain, to=req.wallet, proof=p),
            want=Want(amount=int(want["amount"]), token=str(want["token"]), chain=str(want["chain"])),
            wallet=req.receive_wallet or own_wallet,
            note=req.note,
        )
    if req.kind == "order":
        return Order(v=PREPAID_VERSION, id=req.msg_id, task=req.task, note=req.note, amount=req.amount,
                     token=req.token, chain=req.chain, proof=p)
    return Pay(id=req.msg_id, amount=req.amount, token=req.token, chain=req.chain, proof=p,
               invoice_ref=req.invoice or None, note=req.note)


def bound_leg(
    msg_type: str,
    body: Mapping[str, Any],
    proof: Mapping[str, Any],
    *,
    payee: str,
    presenter: str,
    proof_key: Callable[[dict[str, Any]], str],
    sign: StatementSigner,
) -> Message | str:
    """The recorded leg (`msg_type`, `body`: what the intent stored) with `proof` in place
    of the placeholder, bound to the paying wallet; or why it cannot be. A payee refuses
    an unsolicited proof that is not bound to its presenter (SPEC "Proof binding"), so a
    leg that cannot be bound is never sent, nor its payment made."""
    try:
        message: Message = model_for(MessageType(msg_type)).model_validate(  # type: ignore[assignment]
            {**body, "type": msg_type}
        )
    except ValueError as exc:
        return f"cannot compose the {msg_type.upper()}: {exc}"[:300]
    if isinstance(message, Offer):
        message = message.model_copy(update={"give": message.give.model_copy(update={"proof": dict(proof)})})
    else:
        message = message.model_copy(update={"proof": dict(proof)})
    try:
        bound = bind_message(message, payee=payee, presenter=presenter, proof_key=proof_key, sign=sign)
    except ValueError as exc:  # a key the rail cannot sign with
        return f"cannot bind the proof: {exc}"[:300]
    if not is_bound(bound):
        return "cannot bind the proof to its payer: the payee would refuse it (payer_mismatch)"
    return bound
