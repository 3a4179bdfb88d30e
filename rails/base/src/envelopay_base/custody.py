"""The Base custodial payer (envelopay.rails.custodial): two-phase payments from a key the
caller holds, over the rail's backend (eth-tester in process, or JSON-RPC).

Sign: pre-check funds, take the account's next nonce and the fees, sign. Broadcast: send
those bytes. One (sender, nonce) can be mined once, so the same bytes sent again pay at
most once; once another transaction took that nonce, these bytes can never land.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envelopay.errors import RailError, TransportError, UsageError
from envelopay.rails.custodial import (
    Broadcast,
    ChainState,
    SignedPayment,
    await_confirmation,
    check_payment,
    tx_proof,
)
from envelopay.rails.interface import AssetInfo
from envelopay_base.assets import is_address, norm_address
from envelopay_base.backend import ChainUnavailable, NodeRefused
from envelopay_base.rail import _BALANCE_OF, BaseRail, _word, sign_statement_with
from envelopay_base.verify import quantity

__all__ = ["BasePayer", "make_payer"]


def _account(secret: bytes) -> Any:
    from eth_account import Account

    if len(secret) != 32:
        raise ValueError("a Base key is 32 bytes")
    try:
        return Account.from_key(secret)
    except (ValueError, TypeError):
        raise ValueError("not a valid secp256k1 key") from None


class BasePayer:
    def __init__(self, rail: BaseRail) -> None:
        self.rail = rail
        self.chain = rail.chains[0]

    def asset(self, token: str) -> AssetInfo | None:
        return self.rail.resolve(token)

    def assets(self) -> tuple[AssetInfo, ...]:
        return tuple(a for a in self.rail.assets() if a.chain == self.chain)

    def new_secret(self) -> bytes:
        import os

        return os.urandom(32)

    def address_of(self, secret: bytes) -> str:
        return str(_account(secret).address)

    def valid_address(self, address: str) -> bool:
        return is_address(address)

    def proof(self, tx_id: str) -> Mapping[str, Any]:
        return tx_proof(tx_id)

    def proof_key(self, proof: dict[str, Any]) -> str:
        return self.rail.proof_key(proof)

    def sign_statement(self, secret: bytes, message: bytes) -> tuple[str, str]:
        return sign_statement_with(_account(secret).key, message)

    async def prepare(self, secret: bytes, *, token: str, amount: int, recipient: str) -> SignedPayment:
        asset = check_payment(self, token, amount, recipient)
        account = _account(secret)
        try:
            tx = await self.rail._build(str(account.address), asset, amount, recipient)
        except ChainUnavailable as exc:
            raise RailError("rpc_unavailable", str(exc)) from exc
        signed = account.sign_transaction(tx)
        return SignedPayment(tx_id="0x" + bytes(signed.hash).hex(), blob=bytes(signed.raw_transaction))

    async def broadcast(self, payment: SignedPayment) -> tuple[Broadcast, str]:
        try:
            await self.rail.backend.send_raw(payment.blob)
        except NodeRefused as exc:
            text = str(exc).lower()
            if "already known" in text:
                return "sent", "already known"
            if "nonce too low" in text or "nonce" in text:
                return "expired", "its nonce was used: the transaction can never land"
            return "failed", str(exc)[:300]
        except ChainUnavailable as exc:
            # No answer: the bytes may have reached the node. Not a refusal: the enforcer
            # keeps the payment broadcast and asks the chain (as the Solana payer does).
            raise TransportError(f"the node did not answer the broadcast: {exc}") from exc
        return await await_confirmation(
            self.lookup,
            payment.tx_id,
            timeout=self.rail._confirm_timeout,
            poll=self.rail._poll,
            failed="the transaction reverted",
        )

    async def lookup(self, tx_id: str) -> ChainState:
        try:
            reading = await self.rail.backend.read(tx_id)
        except ChainUnavailable as exc:
            raise TransportError(str(exc)) from exc
        receipt = reading.receipt
        if receipt is not None and receipt.get("blockNumber") is not None:
            try:
                return "confirmed" if quantity(receipt.get("status"), "receipt.status") == 1 else "failed"
            except ValueError:
                return "pending"
        return "pending" if reading.tx is not None else "missing"

    async def balances(self, address: str) -> dict[str, int]:
        if not is_address(address):
            raise UsageError("not an EVM address")
        out: dict[str, int] = {}
        for asset in self.assets():
            if asset.address is None:
                out[asset.symbol] = await self.rail.backend.balance(address)
            else:
                answer = await self.rail.backend.call(
                    asset.address, "0x" + _BALANCE_OF + _word(norm_address(address))
                )
                out[asset.symbol] = int(answer[2:] or "0", 16)
        return out


def make_payer(rail: Any) -> BasePayer:
    if not isinstance(rail, BaseRail):
        raise TypeError("make_payer needs a BaseRail")
    return BasePayer(rail)
