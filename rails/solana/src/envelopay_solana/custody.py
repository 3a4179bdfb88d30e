"""The Solana custodial payer (envelopay.rails.custodial): two-phase payments from a key
the caller holds, over the rail's backend (the in-process LiteSVM chain or JSON-RPC).

Sign: pre-check funds, fetch the latest blockhash, sign. Broadcast: send those bytes.
A Solana network keeps one transaction per signature, so the same bytes sent again pay
at most once; once the blockhash has expired the transaction can never land.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from solders.hash import Hash
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.transaction import Transaction

from envelopay.errors import RailError, TransportError, UsageError
from envelopay.rails.custodial import (
    Broadcast,
    ChainState,
    SignedPayment,
    await_confirmation,
    check_payment,
    short_of_funds,
    tx_proof,
)
from envelopay.rails.interface import AssetInfo
from envelopay_solana import tx as txb
from envelopay_solana.rail import TOKEN_ACCOUNT_RENT, SolanaRail, _check_new_account_rent, _is_pubkey
from envelopay_solana.rpc import RpcError
from envelopay_solana.verify import COMMITMENT_RANK

__all__ = ["SolanaPayer", "make_payer"]


def _keypair(secret: bytes) -> Keypair:
    if len(secret) == 64:
        try:
            return Keypair.from_bytes(secret)
        except ValueError:
            raise ValueError("not a valid Solana keypair") from None
    if len(secret) == 32:
        return Keypair.from_seed(secret)
    raise ValueError("a Solana keypair is 64 bytes (or a 32-byte seed)")


class SolanaPayer:
    def __init__(self, rail: SolanaRail) -> None:
        self.rail = rail
        self.chain = rail.chain

    def asset(self, token: str) -> AssetInfo | None:
        return self.rail.asset(self.chain, token)

    def assets(self) -> tuple[AssetInfo, ...]:
        return tuple(a for a in self.rail.assets() if a.chain == self.chain)

    def new_secret(self) -> bytes:
        return bytes(Keypair())

    def address_of(self, secret: bytes) -> str:
        return str(_keypair(secret).pubkey())

    def valid_address(self, address: str) -> bool:
        return _is_pubkey(address)

    def proof(self, tx_id: str) -> Mapping[str, Any]:
        return tx_proof(tx_id)

    def proof_key(self, proof: dict[str, Any]) -> str:
        return self.rail.proof_key(proof)

    def sign_statement(self, secret: bytes, message: bytes) -> tuple[str, str]:
        kp = _keypair(secret)  # ed25519 over the statement's bytes, as the rail signs
        return str(kp.pubkey()), str(kp.sign_message(message))

    # -- sign ---------------------------------------------------------------------------

    async def prepare(self, secret: bytes, *, token: str, amount: int, recipient: str) -> SignedPayment:
        asset = check_payment(self, token, amount, recipient)
        kp = _keypair(secret)
        me, to = kp.pubkey(), Pubkey.from_string(recipient)
        # Independent reads: over JSON-RPC the checks and the blockhash go as one batch.
        _, blockhash = await asyncio.gather(self._precheck(me, to, asset, amount), self._blockhash())
        ixs = txb.payment_instructions(me, to, asset, amount, create_ata=not asset.native)
        signed = txb.sign(ixs, kp, blockhash)
        return SignedPayment(tx_id=str(signed.signatures[0]), blob=bytes(signed))

    async def _blockhash(self) -> Hash:
        if self.rail.local is not None:
            return self.rail.local.latest_blockhash()
        assert self.rail.rpc is not None
        latest = await self.rail.rpc.call("getLatestBlockhash", [{"commitment": "confirmed"}])
        return Hash.from_string(latest["value"]["blockhash"])

    async def _sol(self, who: Pubkey) -> int:
        if self.rail.local is not None:
            return self.rail.local.balance(who)
        assert self.rail.rpc is not None
        return int((await self.rail.rpc.call("getBalance", [str(who), {"commitment": "confirmed"}]))["value"])

    async def _token(self, account: Pubkey) -> int | None:
        if self.rail.local is not None:
            return self.rail.local.token_balance(account)
        assert self.rail.rpc is not None
        try:
            doc = await self.rail.rpc.call(
                "getTokenAccountBalance", [str(account), {"commitment": "confirmed"}]
            )
        except RpcError:
            return None  # no such account
        return int(doc["value"]["amount"])

    async def _exists(self, account: Pubkey) -> bool:
        if self.rail.local is not None:
            return self.rail.local.account_exists(account)
        assert self.rail.rpc is not None
        info = await self.rail.rpc.call(
            "getAccountInfo", [str(account), {"encoding": "base64", "commitment": "confirmed"}]
        )
        return info.get("value") is not None

    async def _precheck(self, me: Pubkey, to: Pubkey, asset: AssetInfo, amount: int) -> None:
        local = self.rail.local
        if local is not None:  # in process: three plain reads, no tasks to gather
            if asset.native:
                sol, exists = local.balance(me), local.account_exists(to)
                if sol < amount + txb.SIGNATURE_FEE:
                    raise self._short(me, f"balance {sol} lamports, need {amount} + fee")
                _check_new_account_rent(amount, exists)
                return
            sol, have = local.balance(me), local.token_balance(txb.ata(me, asset))
            self._funds(me, asset, amount, sol, have, local.account_exists(txb.ata(to, asset)))
            return
        try:
            if asset.native:
                sol, exists = await asyncio.gather(self._sol(me), self._exists(to))
                if sol < amount + txb.SIGNATURE_FEE:
                    raise self._short(me, f"balance {sol} lamports, need {amount} + fee")
                _check_new_account_rent(amount, exists)
                return
            sol, have, exists = await asyncio.gather(
                self._sol(me), self._token(txb.ata(me, asset)), self._exists(txb.ata(to, asset))
            )
        except RpcError as exc:
            raise RailError("rpc_unavailable", exc.message) from exc
        self._funds(me, asset, amount, sol, have, exists)

    def _short(self, me: Pubkey, detail: str) -> RailError:
        return short_of_funds(self.chain, str(me), detail, native="--sol")

    def _funds(
        self, me: Pubkey, asset: AssetInfo, amount: int, sol: int, have: int | None, exists: bool
    ) -> None:
        if (have or 0) < amount:
            raise self._short(me, f"{asset.symbol} balance {have or 0}, need {amount}")
        if sol < txb.SIGNATURE_FEE + (0 if exists else TOKEN_ACCOUNT_RENT):
            raise self._short(me, "not enough SOL for fee and recipient's account")

    # -- broadcast and look up ----------------------------------------------------------

    async def broadcast(self, payment: SignedPayment) -> tuple[Broadcast, str]:
        tx = Transaction.from_bytes(payment.blob)
        if self.rail.local is not None:
            result = self.rail.local.send(tx)
            if result.ok:
                return "sent", ""
            return _classify(result.error or "")
        assert self.rail.rpc is not None
        wire = base64.b64encode(payment.blob).decode()
        try:
            # The first lookup rides in the send's batch (the id is the signature, known
            # before the send); a node that has not seen it yet is asked again after `poll`.
            _, first = await asyncio.gather(
                self.rail.rpc.call(
                    "sendTransaction", [wire, {"encoding": "base64", "preflightCommitment": "confirmed"}]
                ),
                self._first_lookup(payment.tx_id),
            )
        except RpcError as exc:
            return _classify(f"{exc.message} {exc.data}")
        return await await_confirmation(
            self.lookup,
            payment.tx_id,
            timeout=self.rail._confirm_timeout,
            poll=self.rail._poll,
            failed="transaction failed on chain",
            first=first,
        )

    async def _first_lookup(self, tx_id: str) -> ChainState | None:
        """The lookup asked beside the send: never an error of its own (it is not the
        send's: the transaction may have landed), only a state or None (ask again)."""
        try:
            return await self.lookup(tx_id)
        except (RpcError, TransportError):
            return None

    async def lookup(self, tx_id: str) -> ChainState:
        if self.rail.local is not None:
            doc, reached = self.rail.local.lookup(tx_id)
            if doc is None:
                return "missing"
            if doc["meta"]["err"] is not None:
                return "failed"
            return "confirmed" if COMMITMENT_RANK[reached or "processed"] >= 1 else "pending"
        assert self.rail.rpc is not None
        try:
            status = await self.rail.rpc.signature_status(tx_id)
        except RpcError as exc:
            raise TransportError(f"signature status: {exc.message}") from exc
        if status is None:
            return "missing"
        if status.get("err") is not None:
            return "failed"
        rank = COMMITMENT_RANK.get(str(status.get("confirmationStatus")), 0)
        return "confirmed" if rank >= COMMITMENT_RANK["confirmed"] else "pending"

    async def balances(self, address: str) -> dict[str, int]:
        if not _is_pubkey(address):
            raise UsageError("not a Solana address")
        owner = Pubkey.from_string(address)
        out: dict[str, int] = {}
        for asset in self.assets():
            if asset.native:
                out[asset.symbol] = await self._sol(owner)
            else:
                out[asset.symbol] = await self._token(txb.ata(owner, asset)) or 0
        return out


def _classify(error: str) -> tuple[Broadcast, str]:
    text = error.lower().replace(" ", "")
    if "alreadyprocessed" in text or "alreadybeenprocessed" in text:
        return "sent", "already processed"
    if "blockhashnotfound" in text:
        return "expired", "blockhash not found: the transaction can never land"
    return "failed", error[:300]


def make_payer(rail: Any) -> SolanaPayer:
    if not isinstance(rail, SolanaRail):
        raise TypeError("make_payer needs a SolanaRail")
    return SolanaPayer(rail)
