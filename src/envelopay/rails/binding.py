"""Binding a proof to the flow it pays: the payer's signature over a statement.

A transfer on a public chain is visible to everyone, so "this transaction paid your
wallet" says nothing about who is presenting it. The binding (SPEC.md, "Proof
binding") closes that: the proof object carries two more fields,

    "payer":     the wallet that authorised the transfer
    "payer_sig": that wallet's signature over `statement(...)`

and the statement names the payee's mailbox, the presenter's mailbox, the id of the
message carrying the proof, the chain and the transaction. Only the paying wallet's
key can produce it, and it is good for that one presentation only. Each rail signs
with its wallet's own message-signing scheme (Solana: ed25519 over the statement's
bytes; Base: EIP-191 personal_sign). This module is pure: the statement, the field
names and the optional protocol a rail implements to sign and check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from envelopay.protocol.messages import Message, Offer, is_proof_carrying

__all__ = [
    "BINDING_SCHEME",
    "PAYER_FIELD",
    "SIG_FIELD",
    "BindingRail",
    "StatementSigner",
    "bind_message",
    "declared_binding",
    "is_bound",
    "statement",
]

BINDING_SCHEME = "payer_sig"  # what an INVOICE / METHODS `binding` field names
PAYER_FIELD = "payer"
SIG_FIELD = "payer_sig"


def statement(*, payee: str, payer: str, message_id: str, chain: str, tx: str) -> bytes:
    """The exact bytes the paying wallet signs. `payee` and `payer` are mailboxes
    (lowercased), `message_id` is the protocol id of the PAY / ORDER / OFFER / ACCEPT
    carrying the proof, `tx` the rail's canonical proof key."""
    lines = (
        "envelopay-bind-v1",
        f"payee:{payee.lower()}",
        f"payer:{payer.lower()}",
        f"id:{message_id}",
        f"chain:{chain}",
        f"tx:{tx}",
    )
    return "\n".join(lines).encode("utf-8", "surrogatepass")


def declared_binding(proof: Mapping[str, Any]) -> tuple[str, str] | None:
    """(payer wallet, signature) when the proof carries a binding of the right shape."""
    payer, sig = proof.get(PAYER_FIELD), proof.get(SIG_FIELD)
    if isinstance(payer, str) and isinstance(sig, str) and 0 < len(payer) <= 256 and 0 < len(sig) <= 512:
        return payer, sig
    return None


@runtime_checkable
class BindingRail(Protocol):
    """A rail that can sign and check bindings (both bundled rails do)."""

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        """(our paying wallet, signature) with the configured key; None without a key."""
        ...

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        """Did `payer`'s key sign `message`? Pure; False for anything malformed."""
        ...


# (the paying wallet, its signature) of a statement, or None when no key is at hand.
StatementSigner = Callable[[bytes], "tuple[str, str] | None"]


def bind_message(
    message: Message,
    *,
    payee: str,
    presenter: str,
    proof_key: Callable[[dict[str, Any]], str],
    sign: StatementSigner,
) -> Message:
    """`message` with `payer` and `payer_sig` added to the proof it presents (PAY, ACCEPT,
    prepaid ORDER, or OFFER's give leg): the one way every sender binds a proof, whether
    the key sits in the engine's rail or in the enforcer's vault. A message that carries
    no proof, or whose proof is bound already, or malformed (the payee answers it), or
    that no key can sign, comes back unchanged."""
    if not is_proof_carrying(message):
        return message
    leg: Any = message.give if isinstance(message, Offer) else message
    chain, proof, pid = getattr(leg, "chain", None), getattr(leg, "proof", None), getattr(message, "id", None)
    if not isinstance(chain, str) or not isinstance(proof, dict) or not isinstance(pid, str):
        return message
    if declared_binding(proof) is not None:
        return message
    try:
        key = proof_key(proof)
    except ValueError:
        return message
    signed = sign(statement(payee=payee, payer=presenter, message_id=pid, chain=chain, tx=key))
    if signed is None:
        return message
    bound = {**proof, PAYER_FIELD: signed[0], SIG_FIELD: signed[1]}
    if isinstance(message, Offer):
        return message.model_copy(update={"give": message.give.model_copy(update={"proof": bound})})
    return message.model_copy(update={"proof": bound})


def is_bound(message: Message) -> bool:
    """Does the proof `message` presents carry a binding of the right shape?"""
    leg: Any = message.give if isinstance(message, Offer) else message
    proof = getattr(leg, "proof", None)
    return isinstance(proof, dict) and declared_binding(proof) is not None
