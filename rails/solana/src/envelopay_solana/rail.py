"""The Solana rail: `make_rail(options)` (entry point `solana`) and `SolanaRail`.

Proof: ``{"tx": "<base58 signature>"}``. Options follow the factory convention in
``envelopay.rails.registry`` (backend, network, rpc_url, keypair, local_chain, assets,
http_client, clock) plus ``confirm_timeout`` (seconds `pay()` waits for the
``confirmed`` commitment over RPC; 0 = return as soon as the node accepted it) and
``poll_interval``, and ``rpc_transport``: "httpx" (default) or "aiohttp" (cheaper per
call with ~100 calls in flight; needs aiohttp installed), ``rpc_batch_max`` (calls of
one event-loop turn go as one JSON-RPC batch of at most this many; 1 = no batching).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from solders.hash import Hash
from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from envelopay.errors import ConfigError, RailError, TransportError, UsageError
from envelopay.rails.custodial import short_of_funds
from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict
from envelopay.rails.registry import find_asset, merge_assets
from envelopay_solana import tx as txb
from envelopay_solana.assets import ASSETS, NETWORK_CHAIN
from envelopay_solana.keys import load_keypair
from envelopay_solana.local import LocalSolana
from envelopay_solana.rpc import RpcError, SolanaRpc
from envelopay_solana.verify import COMMITMENT_RANK, check_transaction

TOKEN_ACCOUNT_RENT = 2_039_280  # lamports, rent-exempt minimum of a 165-byte token account
RENT_EXEMPT_MINIMUM = 890_880  # lamports, rent-exempt minimum of a 0-byte system account


def canonical_signature(proof: Mapping[str, Any]) -> str:
    """The one spelling of a proof's transaction signature (base58 of its 64 bytes).

    Accepts base58, hex (128 digits, optional 0x) or base64 (88 chars) for the same
    64 bytes. Raises ValueError for anything else."""
    if not isinstance(proof, Mapping):
        raise ValueError("proof must be an object")
    value = proof.get("tx")
    if not isinstance(value, str):
        raise ValueError('proof needs "tx": a transaction signature string')
    text = value.strip()
    raw: bytes | None = None
    hex_text = text[2:] if text[:2] in ("0x", "0X") else text
    if len(hex_text) == 128 and all(c in "0123456789abcdefABCDEF" for c in hex_text):
        raw = bytes.fromhex(hex_text)
    elif len(text) == 88 and text.endswith("=="):
        try:
            raw = base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise ValueError("proof tx is not valid base64") from exc
    if raw is not None:
        if len(raw) != 64:
            raise ValueError("a Solana signature is 64 bytes")
        return str(Signature.from_bytes(raw))
    if not 64 <= len(text) <= 88:
        raise ValueError("a Solana signature is 64 bytes (87-88 base58 characters)")
    try:
        return str(Signature.from_string(text))
    except ValueError as exc:
        raise ValueError("proof tx is not a base58 Solana signature") from exc


class SolanaRail:
    """Verifies and makes SOL / SPL payments on one Solana network."""

    name = "solana"

    def __init__(
        self,
        *,
        network: str,
        assets: tuple[AssetInfo, ...],
        local_chain: LocalSolana | None = None,
        rpc: SolanaRpc | None = None,
        keypair: Keypair | None = None,
        clock: Callable[[], datetime] | None = None,
        confirm_timeout: float = 60.0,
        poll_interval: float = 0.5,
    ) -> None:
        if (local_chain is None) == (rpc is None):
            raise ConfigError("a Solana rail needs exactly one backend: a local chain or an RPC endpoint")
        self.network = network
        self.chain = NETWORK_CHAIN[network]
        self._assets = assets
        self.local = local_chain
        self.rpc = rpc
        self.keypair = keypair
        self._clock = clock or (lambda: datetime.now(UTC))
        self._confirm_timeout = confirm_timeout
        self._poll = poll_interval
        self._send_lock = asyncio.Lock()

    @property
    def chains(self) -> tuple[str, ...]:
        return (self.chain,)

    def assets(self) -> tuple[AssetInfo, ...]:
        return self._assets

    def asset(self, chain: str, token: str) -> AssetInfo | None:
        return find_asset(self._assets, chain, token)

    def proof_key(self, proof: dict[str, Any]) -> str:
        return canonical_signature(proof)

    # -- address syntax (envelopay.rails.interface.AddressSyntax) ------------------------

    def parse_address(self, chain: str, address: str) -> str:
        """A base58 public key of 32 bytes, as Solana spells it."""
        if not (address.isascii() and 32 <= len(address) <= 44):
            raise ValueError("a Solana address is 32 to 44 base58 characters")
        try:
            return str(Pubkey.from_string(address))
        except ValueError as exc:
            raise ValueError("not a base58 Solana public key") from exc

    def max_amount(self, chain: str) -> int:
        return U64_MAX  # SPL Token and the System Program carry amounts as u64

    @property
    def payer(self) -> str | None:
        return str(self.keypair.pubkey()) if self.keypair is not None else None

    # -- binding (envelopay.rails.binding): ed25519 over the statement's bytes --------

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        if self.keypair is None:
            return None
        return str(self.keypair.pubkey()), str(self.keypair.sign_message(message))

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        try:
            return bool(Signature.from_string(signature).verify(Pubkey.from_string(payer), message))
        except (ValueError, TypeError):
            return False

    # -- verify -----------------------------------------------------------------------

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        if expectation.chain not in self.chains:
            return Verdict.rejected(Reason.CHAIN_MISMATCH,
                                    f"this rail verifies {self.chain}, not {expectation.chain}")
        asset = self.asset(expectation.chain, expectation.token)
        if asset is None:
            return Verdict.rejected(Reason.UNSUPPORTED_ASSET,
                                    f"unknown token {expectation.token!r} on {self.chain}")
        try:
            signature = canonical_signature(proof)
        except ValueError as exc:
            return Verdict.rejected(Reason.MALFORMED_PROOF, str(exc))
        if not _is_pubkey(expectation.recipient):
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH, "recipient is not a Solana address")
        # getTransaction serves "confirmed" at the lowest; "processed" is treated as confirmed.
        commitment = "finalized" if expectation.commitment == "finalized" else "confirmed"
        try:
            doc, reached = await self._lookup(signature, commitment)
        except TransportError as exc:
            return Verdict.unavailable(str(exc))
        if doc is None:
            if reached is None:
                return Verdict.rejected(Reason.TX_NOT_FOUND, f"no transaction {signature} on {self.chain}")
            return Verdict.pending(f"transaction at {reached}, needs {commitment}")
        return check_transaction(doc, expectation, asset, signature=signature, confirmation=reached)

    async def _lookup(self, signature: str, commitment: str) -> tuple[dict[str, Any] | None, str | None]:
        """(document if it reached `commitment`, commitment reached) — (None, None) = unknown."""
        if self.local is not None:
            doc, reached = self.local.lookup(signature)
            if doc is None or reached is None:
                return None, None
            if COMMITMENT_RANK[reached] < COMMITMENT_RANK[commitment]:
                return None, reached
            return doc, reached
        assert self.rpc is not None
        for _attempt in range(2):
            doc = await self.rpc.get_transaction(signature, commitment)
            if doc is not None:
                return doc, commitment
            status = await self.rpc.signature_status(signature)
            if status is None:
                return None, None
            reached = status.get("confirmationStatus")
            if not isinstance(reached, str) or reached not in COMMITMENT_RANK:
                reached = "processed"
            if COMMITMENT_RANK[reached] < COMMITMENT_RANK[commitment]:
                return None, reached
            # Reached the commitment between the two calls: ask for the document again.
        return None, "processed"

    # -- pay --------------------------------------------------------------------------

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        if self.keypair is None:
            raise ConfigError("this Solana rail has no keypair configured (option 'keypair')")
        # Caller mistakes are refused before any I/O (UsageError); RailError is for a
        # payment that could not be made.
        if chain not in self.chains:
            raise UsageError(f"this rail pays on {self.chain}, not {chain}")
        asset = self.asset(chain, token)
        if asset is None:
            raise UsageError(f"unknown token {token!r} on {self.chain}")
        if not _is_pubkey(recipient):
            raise UsageError(f"recipient {recipient!r} is not a Solana address")
        if amount <= 0:
            raise UsageError("amount must be positive")
        if amount > U64_MAX:  # was read as "insufficient funds", the environment's fault
            raise UsageError(f"amount {amount} is more than one transfer carries (u64: at most {U64_MAX})")
        to = Pubkey.from_string(recipient)
        if self.local is not None:
            return self._pay_local(asset, amount, to)
        return await self._pay_rpc(asset, amount, to)

    def _pay_local(self, asset: AssetInfo, amount: int, to: Pubkey) -> dict[str, Any]:
        assert self.local is not None and self.keypair is not None
        me = self.keypair.pubkey()
        sol = self.local.balance(me)
        if asset.native:
            if sol < amount + txb.SIGNATURE_FEE:
                raise _short(asset, me, f"balance {sol} lamports, need {amount} + fee")
            _check_new_account_rent(amount, self.local.account_exists(to))
        else:
            have = self.local.token_balance(txb.ata(me, asset)) or 0
            if have < amount:
                raise _short(asset, me, f"{asset.symbol} balance {have}, need {amount}")
            rent = 0 if self.local.account_exists(txb.ata(to, asset)) else TOKEN_ACCOUNT_RENT
            if sol < txb.SIGNATURE_FEE + rent:
                raise _short(asset, me, "not enough SOL for fee and recipient's account")
        ixs = txb.payment_instructions(me, to, asset, amount, create_ata=not asset.native)
        result = self.local.send(txb.sign(ixs, self.keypair, self.local.latest_blockhash()))
        if not result.ok:
            raise RailError("tx_failed", result.error or "")
        return {"tx": result.signature}

    async def _pay_rpc(self, asset: AssetInfo, amount: int, to: Pubkey) -> dict[str, Any]:
        assert self.rpc is not None and self.keypair is not None
        me = self.keypair.pubkey()
        confirmed = {"commitment": "confirmed"}
        try:
            # One payment at a time from this wallet between "latest blockhash" and "sent":
            # two payments signed against one blockhash can be the same transaction (the
            # network keeps one), and a dev node that turns its blockhash per transaction
            # refuses the second. The read-only checks and the blockhash are independent:
            # asked together they travel as one JSON-RPC batch (one round trip, not four).
            async with self._send_lock:
                latest_call = self.rpc.call("getLatestBlockhash", [confirmed])
                if asset.native:
                    sol_doc, found, latest = await asyncio.gather(
                        self.rpc.call("getBalance", [str(me), confirmed]),
                        self._account_exists_rpc(to) if amount < RENT_EXEMPT_MINIMUM else _true(),
                        latest_call)
                    sol = int(sol_doc["value"])
                    if sol < amount + txb.SIGNATURE_FEE:
                        raise _short(asset, me, f"balance {sol} lamports, need {amount} + fee")
                    _check_new_account_rent(amount, found)
                else:
                    sol_doc, have, exists, latest = await asyncio.gather(
                        self.rpc.call("getBalance", [str(me), confirmed]),
                        self._token_balance_rpc(txb.ata(me, asset)),
                        self._account_exists_rpc(txb.ata(to, asset)),
                        latest_call)
                    sol = int(sol_doc["value"])
                    if have < amount:
                        raise _short(asset, me, f"{asset.symbol} balance {have}, need {amount}")
                    rent = 0 if exists else TOKEN_ACCOUNT_RENT
                    if sol < txb.SIGNATURE_FEE + rent:
                        raise _short(asset, me, "not enough SOL for fee and recipient's account")
                ixs = txb.payment_instructions(me, to, asset, amount, create_ata=not asset.native)
                blockhash = Hash.from_string(latest["value"]["blockhash"])
                signed = txb.sign(ixs, self.keypair, blockhash)
                signature = str(signed.signatures[0])
                wire = base64.b64encode(bytes(signed)).decode()
                # The signature is known before the send: its first status check rides in
                # the send's batch (a node that answers in order may already have it; one
                # that has not is asked again after the poll interval, as before).
                try:
                    sent, status = await asyncio.gather(
                        self.rpc.call("sendTransaction", [wire, {"encoding": "base64",
                                                                 "preflightCommitment": "confirmed"}]),
                        self._look(signature))
                except RpcError:
                    raise  # the node answered: it refused the transaction
                except TransportError as exc:
                    # The bytes may have reached the node before it went: the money may move.
                    raise RailError("not_final", f"the node did not acknowledge {signature}: {exc}",
                                    sent={"tx": signature}) from exc
        except RpcError as exc:
            text = f"{exc.message} {exc.data}".lower()
            reason = "insufficient_funds" if "insufficient" in text else "tx_failed"
            raise RailError(reason, exc.message) from exc
        except TransportError as exc:
            # Before the send (the send's own is `not_final` above): nothing left, as the
            # Base rail says it. A RailError, so every payer hears it (the worker's OFFER
            # counter-leg answers it instead of quarantining the OFFER).
            raise RailError("rpc_unavailable", str(exc)) from exc
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise RailError("rpc_unavailable", f"unexpected answer from the Solana node: {exc}") from exc
        if sent != signature:  # a node not to be believed; ours is out
            raise RailError("not_final", f"the node acknowledged {str(sent)[:100]!r}, not {signature}",
                            sent={"tx": signature})
        await self._await_confirmation(signature, status)
        return {"tx": signature}

    async def _account_exists_rpc(self, account: Pubkey) -> bool:
        assert self.rpc is not None
        info = await self.rpc.call("getAccountInfo", [
            str(account), {"encoding": "base64", "commitment": "confirmed"}])
        return info.get("value") is not None

    async def _token_balance_rpc(self, account: Pubkey) -> int:
        assert self.rpc is not None
        try:
            result = await self.rpc.call("getTokenAccountBalance",
                                         [str(account), {"commitment": "confirmed"}])
        except RpcError:
            return 0  # the account does not exist: nothing to spend
        return int(result["value"]["amount"])

    async def _look(self, signature: str) -> dict[str, Any] | None:
        """A status look after (or beside) the send: never an error of its own (the
        transaction may be out; an error must not read as the send's or as a failed
        payment), only a status or None (the next poll asks again)."""
        assert self.rpc is not None
        if self._confirm_timeout <= 0:
            return None
        try:
            return await self.rpc.signature_status(signature)
        except TransportError:  # RpcError too: the node answered an error
            return None

    async def _await_confirmation(self, signature: str, status: dict[str, Any] | None) -> None:
        """Until `signature` is confirmed, from `status` (its first status, or None)."""
        assert self.rpc is not None
        if self._confirm_timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._confirm_timeout
        while True:
            if status is not None:
                if status.get("err") is not None:
                    raise RailError("tx_failed", str(status["err"]))
                reached = COMMITMENT_RANK.get(str(status.get("confirmationStatus")), 0)
                if reached >= COMMITMENT_RANK["confirmed"]:
                    return
            if loop.time() >= deadline:
                raise RailError("not_final", f"{signature} not confirmed within {self._confirm_timeout}s",
                                sent={"tx": signature})
            await asyncio.sleep(self._poll)
            status = await self._look(signature)

    async def warm(self) -> None:
        """Load now what the first verification would load (AgentNode.serve calls it)."""
        if self.rpc is not None:
            await self.rpc.warm()

    async def aclose(self) -> None:
        if self.rpc is not None:
            await self.rpc.aclose()


async def _true() -> bool:
    return True


def _short(asset: AssetInfo, me: Pubkey, detail: str) -> RailError:
    return short_of_funds(asset.chain, str(me), detail, native="--sol")


def _check_new_account_rent(amount: int, exists: bool) -> None:
    """The runtime refuses a transfer that would create an account below the rent-exempt
    minimum (InsufficientFundsForRent): say so before paying a fee for nothing."""
    if not exists and amount < RENT_EXEMPT_MINIMUM:
        raise UsageError(f"{amount} lamports to an account that does not exist yet is below the "
                         f"rent-exempt minimum of {RENT_EXEMPT_MINIMUM} lamports")


U64_MAX = 2**64 - 1


def _is_pubkey(value: str) -> bool:
    try:
        Pubkey.from_string(value)
    except ValueError:
        return False
    return True


def make_rail(options: Mapping[str, Any]) -> SolanaRail:
    """Entry point `solana`: build a rail from factory-convention options."""
    backend = options.get("backend") or ("rpc" if options.get("rpc_url") else "local")
    if backend not in ("local", "rpc"):
        raise ConfigError(f"Solana rail: backend must be 'local' or 'rpc', not {backend!r}")
    network = options.get("network") or ("local" if backend == "local" else "mainnet")
    if network not in NETWORK_CHAIN:
        raise ConfigError(f"Solana rail: network must be one of {sorted(NETWORK_CHAIN)}, not {network!r}")
    assets = merge_assets(ASSETS, options.get("assets"))
    keypair = load_keypair(options["keypair"]) if options.get("keypair") is not None else None
    clock = options.get("clock")
    common: dict[str, Any] = {
        "network": network, "assets": assets, "keypair": keypair, "clock": clock,
        "confirm_timeout": float(options.get("confirm_timeout", 60.0)),
        "poll_interval": float(options.get("poll_interval", 0.5)),
    }
    if backend == "local":
        if network != "local":
            # LiteSVM holds none of mainnet's or devnet's accounts: never pretend it does.
            raise ConfigError("Solana rail: the local backend serves only the 'local' network")
        chain = options.get("local_chain")
        if chain is None:
            chain = LocalSolana(clock=clock)
        if not isinstance(chain, LocalSolana):
            raise ConfigError("Solana rail: local_chain must be an envelopay_solana.LocalSolana")
        return SolanaRail(local_chain=chain, **common)
    url = options.get("rpc_url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError("Solana rail: the rpc backend needs rpc_url (http:// or https://)")
    client = options.get("http_client")
    if client is not None and not isinstance(client, httpx.AsyncClient):
        raise ConfigError("Solana rail: http_client must be an httpx.AsyncClient")
    transport = options.get("rpc_transport", "httpx")
    if transport not in ("httpx", "aiohttp"):
        raise ConfigError("Solana rail: rpc_transport must be 'httpx' or 'aiohttp'")
    if transport == "aiohttp" and client is not None:
        raise ConfigError("Solana rail: http_client (httpx) does not go with rpc_transport aiohttp")
    batch_max = int(options.get("rpc_batch_max", 100))
    if batch_max < 1:
        raise ConfigError("Solana rail: rpc_batch_max must be at least 1")
    return SolanaRail(rpc=SolanaRpc(url, client, transport=transport, batch_max=batch_max), **common)
