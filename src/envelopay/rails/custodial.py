"""The custodial payer contract: how the spend enforcer pays from a wallet it holds.

`Rail.pay()` signs and broadcasts in one step from the rail's own configured key. The
enforcer needs the two apart, and the key passed in per payment, so that it can keep its
"at most once, with recovery" promise: the signed transaction's id is recorded *before*
it is broadcast, and after a crash the chain is asked about that id before anything else
(the same signed bytes may be broadcast again; a second payment is never signed).

A rail distribution offers this as `<package>.custody.make_payer(rail) -> CustodialPayer`.
No chain library is imported here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from envelopay.errors import RailError, UsageError
from envelopay.rails.interface import AssetInfo

__all__ = [
    "Broadcast",
    "ChainState",
    "CustodialPayer",
    "SignedPayment",
    "await_confirmation",
    "check_payment",
    "short_of_funds",
    "tx_proof",
]

# What a broadcast did: "sent" (the network has it, or already had it), "expired" (it
# can never land: its validity window has passed), "failed" (refused or failed on chain).
Broadcast = Literal["sent", "expired", "failed"]
# What the chain says of a transaction id.
ChainState = Literal["confirmed", "failed", "pending", "missing"]


@dataclass(frozen=True, slots=True)
class SignedPayment:
    """A signed, not yet broadcast payment. `blob` is the wire transaction: public once
    broadcast, and no key material."""

    tx_id: str
    blob: bytes


@runtime_checkable
class CustodialPayer(Protocol):
    chain: str

    def asset(self, token: str) -> AssetInfo | None: ...

    def assets(self) -> tuple[AssetInfo, ...]: ...

    def new_secret(self) -> bytes:
        """Fresh key material for a new wallet."""
        ...

    def address_of(self, secret: bytes) -> str:
        """The wallet address of key material; ValueError (never echoing it) if invalid."""
        ...

    def valid_address(self, address: str) -> bool: ...

    async def prepare(self, secret: bytes, *, token: str, amount: int, recipient: str) -> SignedPayment:
        """Pre-check (funds) and sign; nothing leaves. RailError when it cannot be paid."""
        ...

    async def broadcast(self, payment: SignedPayment) -> tuple[Broadcast, str]:
        """Hand the signed bytes to the network and wait for confirmation where it can;
        (outcome, detail). Broadcasting the same bytes twice pays at most once."""
        ...

    async def lookup(self, tx_id: str) -> ChainState: ...

    async def balances(self, address: str) -> dict[str, int]:
        """Smallest-unit balances of the chain's known assets, by symbol."""
        ...

    def proof(self, tx_id: str) -> Mapping[str, Any]:
        """The PAY proof object for a transaction id."""
        ...

    def proof_key(self, proof: dict[str, Any]) -> str:
        """The rail's canonical proof key (what the binding statement names); ValueError
        for a malformed proof."""
        ...

    def sign_statement(self, secret: bytes, message: bytes) -> tuple[str, str]:
        """(the wallet of `secret`, its signature of `message`) in the rail's binding
        scheme (envelopay.rails.binding), so the payee's rail checks it as it checks
        any payer's."""
        ...


# -- shared by the rails' payers --------------------------------------------------------


def check_payment(payer: CustodialPayer, token: str, amount: int, recipient: str) -> AssetInfo:
    """The asset to pay, after the caller mistakes every payer refuses before any I/O
    (UsageError): an unknown token, a recipient that is no address of the chain, a
    non-positive amount."""
    asset = payer.asset(token)
    if asset is None:
        raise UsageError(f"unknown token {token!r} on {payer.chain}")
    if not payer.valid_address(recipient):
        raise UsageError(f"recipient is not a {payer.chain} address")
    if amount <= 0:
        raise UsageError("amount must be positive")
    return asset


async def await_confirmation(
    lookup: Callable[[str], Awaitable[ChainState]],
    tx_id: str,
    *,
    timeout: float,
    poll: float,
    failed: str,
    first: ChainState | None = None,
) -> tuple[Broadcast, str]:
    """After a broadcast: ask the chain until it confirms, fails (`failed` is the detail)
    or `timeout` seconds pass — then "sent", "not yet confirmed": the caller looks it up
    later, and never signs again. `first`: the state already asked beside the broadcast
    (None: ask now)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout, 0.0)
    state = first if first is not None else await lookup(tx_id)
    while True:
        if state == "confirmed":
            return "sent", ""
        if state == "failed":
            return "failed", failed
        if loop.time() >= deadline:
            return "sent", "not yet confirmed"
        await asyncio.sleep(poll)
        state = await lookup(tx_id)


def short_of_funds(chain: str, wallet: str, detail: str, *, native: str) -> RailError:
    """insufficient_funds for `wallet`. On a local chain (the devnet's) it names the command
    that funds it: a restarted devnet starts every wallet empty, and the agent's operator
    meets this error first. `native` is `envelopay fund`'s option for the chain's coin."""
    if chain.endswith("-local"):
        detail += f"; on the devnet, fund the wallet: envelopay fund {wallet} {native} 1 --usdc 10"
    return RailError("insufficient_funds", detail)


def tx_proof(tx_id: str) -> Mapping[str, Any]:
    """The PAY proof of a transaction id, on every rail that proves by transaction."""
    return {"tx": tx_id}
