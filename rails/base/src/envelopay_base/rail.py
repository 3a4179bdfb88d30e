"""The Base rail: `make_rail(options)` (entry point `base`) and the `BaseRail` it builds.

Options follow the factory convention in envelopay.rails.registry: backend (local|rpc),
network (mainnet|sepolia|local), rpc_url, keypair (path to a file holding a hex private
key, or the key as bytes), local_chain (a shared `LocalChain`), assets, http_client, clock
(block times of a fresh local chain follow it).
Base-specific: chain_id (for an rpc backend on the "local" network; when absent the rail
binds to the id the node reports on first contact — a dev chain has no id to protect) and
rpc_batch_max (most calls per JSON-RPC batch, default 100; 1 turns batching off). Like the
Solana rail: confirm_timeout (seconds `pay()` waits for the transaction's receipt; 0 =
return once the node accepted it) and poll_interval.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError, RailError, UsageError
from envelopay.rails.custodial import short_of_funds
from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict
from envelopay.rails.registry import find_asset, merge_assets
from envelopay_base.assets import ASSETS, CHAIN_IDS, NETWORK_CHAIN, is_address, norm_address
from envelopay_base.backend import Backend, ChainUnavailable, Fees, NodeRefused
from envelopay_base.verify import canonical_tx_hash, check_payment, quantity

ETH_TRANSFER_GAS = 21_000
# transfer(address,uint256) and balanceOf(address) selectors.
_TRANSFER = "a9059cbb"
_BALANCE_OF = "70a08231"


def _word(value: int | str) -> str:
    if isinstance(value, str):
        return value.lower().removeprefix("0x").rjust(64, "0")
    return f"{value:064x}"


def erc20_transfer_data(recipient: str, amount: int) -> str:
    return "0x" + _TRANSFER + _word(norm_address(recipient)) + _word(amount)


def load_key(source: Any) -> bytes:
    """A 32-byte private key from a key file path (hex text) or from bytes (raw or hex)."""
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            raw: bytes = path.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read key file {path}: {exc.strerror}") from exc
    elif isinstance(source, bytes | bytearray):
        raw = bytes(source)
    else:
        raise ConfigError("keypair must be a key file path or bytes")
    if len(raw) == 32:
        return raw
    text = raw.decode("ascii", errors="replace").strip().lower().removeprefix("0x")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise ConfigError("key file must hold a 32-byte private key in hex")
    return key


class BaseRail:
    """Verifies and makes ETH / ERC-20 payments on one Base network."""

    name = "base"

    def __init__(
        self,
        *,
        chain: str,
        backend: Backend,
        assets: tuple[AssetInfo, ...],
        chain_id: int | None,
        key: bytes | None = None,
        local_chain: Any = None,
        confirm_timeout: float = 60.0,
        poll_interval: float = 0.5,
    ) -> None:
        self._chain = chain
        self.backend = backend
        self._assets = assets
        self.chain_id = chain_id
        self._key = key
        self.local_chain = local_chain
        self._confirm_timeout = confirm_timeout
        self._poll = poll_interval
        self._pay_lock = asyncio.Lock()

    @property
    def chains(self) -> tuple[str, ...]:
        return (self._chain,)

    def assets(self) -> tuple[AssetInfo, ...]:
        """The registry for every Base network (this instance verifies only `chains`)."""
        return self._assets

    def resolve(self, token: str) -> AssetInfo | None:
        return find_asset(self._assets, self._chain, token, normalize=norm_address)

    def proof_key(self, proof: dict[str, Any]) -> str:
        return canonical_tx_hash(proof)

    # -- address syntax (envelopay.rails.interface.AddressSyntax) ------------------------

    def parse_address(self, chain: str, address: str) -> str:
        """0x and 40 hex digits (20 bytes), compared in lower case."""
        return norm_address(address)

    def max_amount(self, chain: str) -> int:
        return 2**256 - 1  # an ERC-20 amount, and a native value, are uint256

    async def aclose(self) -> None:
        await self.backend.aclose()

    # -- binding (envelopay.rails.binding): EIP-191 personal_sign over the statement ----

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        return None if self._key is None else sign_statement_with(self._key, message)

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        from eth_account import Account
        from eth_account.messages import encode_defunct

        if not is_address(payer):
            return False
        try:
            signer = Account.recover_message(encode_defunct(primitive=message), signature=signature)
        except Exception:  # eth_account raises several types for a malformed signature
            return False
        return norm_address(str(signer)) == norm_address(payer)

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        try:
            tx_hash = canonical_tx_hash(proof)
        except ValueError as exc:
            return Verdict.rejected(Reason.MALFORMED_PROOF, str(exc))
        if expectation.chain != self._chain:
            return Verdict.rejected(
                Reason.CHAIN_MISMATCH, f"this rail verifies {self._chain}, not {expectation.chain}"
            )
        asset = self.resolve(expectation.token)
        if asset is None:
            return Verdict.rejected(
                Reason.UNSUPPORTED_ASSET, f"unknown token {expectation.token!r} on {self._chain}"
            )
        if not is_address(expectation.recipient):
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH, "recipient is not an EVM address")
        if expectation.payer is not None and not is_address(expectation.payer):
            return Verdict.rejected(Reason.PAYER_MISMATCH, "payer is not an EVM address")
        try:
            reading = await self.backend.read(tx_hash)
        except ChainUnavailable as exc:
            return Verdict.unavailable(str(exc))
        if self.chain_id is None:
            self.chain_id = reading.chain_id  # a dev node: bind to the id it reports first
        return check_payment(
            tx_hash=tx_hash,
            tx=reading.tx,
            receipt=reading.receipt,
            block=reading.block,
            head=reading.head,
            chain_id=reading.chain_id,
            expected_chain_id=self.chain_id,
            expectation=expectation,
            asset=asset,
        )

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        if chain != self._chain:
            raise UsageError(f"this rail pays on {self._chain}, not {chain}")
        asset = self.resolve(token)
        if asset is None:
            raise UsageError(f"unknown token {token!r} on {chain}")
        if not is_address(recipient):
            raise UsageError(f"recipient is not an EVM address: {recipient[:60]!r}")
        if amount <= 0:
            raise UsageError("amount must be a positive integer in the smallest unit")
        if self._key is None:
            raise ConfigError("the base rail has no keypair configured (option 'keypair')")
        from eth_account import Account

        account = Account.from_key(self._key)
        sender = str(account.address)
        try:
            async with self._pay_lock:  # one nonce at a time per paying key
                tx = await self._build(sender, asset, amount, recipient)
                signed = account.sign_transaction(tx)
                tx_hash = "0x" + bytes(signed.hash).hex()
                try:
                    acknowledged = await self.backend.send_raw(bytes(signed.raw_transaction))
                except NodeRefused:
                    raise  # the node answered: it refused the transaction
                except ChainUnavailable as exc:
                    # No answer: the bytes may have reached the node, the money may move.
                    raise RailError(Reason.NOT_FINAL.value, f"the node did not acknowledge {tx_hash}: {exc}",
                                    sent={"tx": tx_hash}) from exc
            if acknowledged.lower() != tx_hash:  # a node not to be believed; ours is out
                raise RailError(Reason.NOT_FINAL.value, f"the node acknowledged {acknowledged[:80]!r}, "
                                f"not {tx_hash}", sent={"tx": tx_hash})
            await self._await_receipt(tx_hash)
        except ChainUnavailable as exc:
            # Geth and op-geth say "insufficient funds for gas * price + value" when the
            # balance moved between our check and the node's.
            broke = "insufficient funds" in str(exc).lower()
            reason = Reason.INSUFFICIENT_FUNDS if broke else Reason.RPC_UNAVAILABLE
            raise RailError(reason.value, str(exc)) from exc
        return {"tx": tx_hash}

    async def _await_receipt(self, tx_hash: str) -> None:
        """Wait until the transaction is in a block; a revert there is a failed payment."""
        if self._confirm_timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._confirm_timeout
        while True:
            try:
                receipt = await self.backend.receipt(tx_hash)
            except ChainUnavailable:
                receipt = None  # the transaction is out: a failed look is asked again
            if receipt is not None and receipt.get("blockNumber") is not None:
                try:
                    status: int | None = quantity(receipt.get("status"), "receipt.status")
                except ValueError:
                    status = None  # a receipt we cannot read is asked again
                if status == 1:
                    return
                if status is not None:
                    raise RailError(Reason.TX_FAILED.value, f"{tx_hash} reverted")
            if loop.time() >= deadline:
                waited = self._confirm_timeout
                raise RailError(Reason.NOT_FINAL.value, f"{tx_hash} not mined within {waited}s",
                                sent={"tx": tx_hash})
            await asyncio.sleep(self._poll)

    async def _build(self, sender: str, asset: AssetInfo, amount: int, recipient: str) -> dict[str, Any]:
        """The unsigned transfer, after checking the sender can pay it and its gas. Every
        read is asked at once, so over JSON-RPC they travel as one batch (rpc.py): one
        round trip, where one per read made five or six."""
        from web3 import Web3

        token = None if asset.address is None else Web3.to_checksum_address(asset.address)
        data = None if token is None else erc20_transfer_data(recipient, amount)
        reads: dict[str, Awaitable[Any]] = {
            "fees": self.backend.fees(),
            "eth": self.backend.balance(sender),
            "nonce": self.backend.nonce(sender),
        }
        if self.chain_id is None:
            reads["chain_id"] = self.backend.chain_id()
        if token is not None:
            reads["held"] = self.backend.call(token, "0x" + _BALANCE_OF + _word(norm_address(sender)))
            reads["gas"] = self.backend.estimate_gas({"from": sender, "to": token, "data": data})
        got: dict[str, Any] = {}
        gas_error: BaseException | None = None
        answers = await asyncio.gather(*reads.values(), return_exceptions=True)
        for name, value in zip(reads, answers, strict=True):
            if not isinstance(value, BaseException):
                got[name] = value
            elif name == "gas":
                # It waits: nodes refuse to estimate for a sender who cannot pay (no ETH for
                # gas, too few tokens), and then the short funds are the answer.
                gas_error = value
            else:
                raise value
        fees: Fees = got["fees"]
        eth_balance: int = got["eth"]
        if self.chain_id is None:
            self.chain_id = int(got["chain_id"])
        tx: dict[str, Any] = {
            "type": 2,
            "chainId": self.chain_id,
            "nonce": got["nonce"],
            "maxFeePerGas": fees.max_fee_per_gas,
            "maxPriorityFeePerGas": fees.max_priority_fee_per_gas,
        }
        if token is None:
            tx.update(to=Web3.to_checksum_address(recipient), value=amount, data=b"", gas=ETH_TRANSFER_GAS)
            needed = amount + ETH_TRANSFER_GAS * fees.max_fee_per_gas
            if eth_balance < needed:
                raise short_of_funds(asset.chain, sender, f"{sender} holds {eth_balance} wei, needs {needed}",
                                     native="--eth")
            return tx
        held = int(got["held"][2:] or "0", 16)
        if held < amount:
            detail = f"{sender} holds {held} of {asset.symbol}, needs {amount}"
            raise short_of_funds(asset.chain, sender, detail, native="--eth")
        if eth_balance < ETH_TRANSFER_GAS * fees.max_fee_per_gas:
            raise short_of_funds(asset.chain, sender, f"{sender} has no ETH for gas", native="--eth")
        if gas_error is not None:
            raise gas_error
        gas = int(got["gas"])
        gas += gas // 5  # estimation is tight; a revert for out-of-gas would waste the fee
        if eth_balance < gas * fees.max_fee_per_gas:
            raise short_of_funds(asset.chain, sender, f"{sender} has too little ETH for gas", native="--eth")
        tx.update(to=token, value=0, data=data, gas=gas)
        return tx


def make_rail(options: Mapping[str, Any]) -> BaseRail:
    """Entry point `base`: build a BaseRail from the factory convention's options."""
    rpc_url = options.get("rpc_url")
    backend_name = options.get("backend") or ("rpc" if rpc_url else "local")
    if backend_name not in ("local", "rpc"):
        raise ConfigError(f"base rail: backend must be 'local' or 'rpc', not {backend_name!r}")
    network = options.get("network") or ("local" if backend_name == "local" else "mainnet")
    if network not in NETWORK_CHAIN:
        raise ConfigError(f"base rail: network must be one of {sorted(NETWORK_CHAIN)}, not {network!r}")
    chain = NETWORK_CHAIN[network]
    key = load_key(options["keypair"]) if options.get("keypair") is not None else None
    builtin = list(ASSETS)
    backend: Backend
    chain_id: int | None
    local_chain = None
    if backend_name == "local":
        if network != "local":
            raise ConfigError("base rail: the local backend serves only the 'local' network")
        from envelopay_base.local import LocalBackend, LocalChain

        local_chain = options.get("local_chain") or LocalChain(clock=options.get("clock"))
        if not isinstance(local_chain, LocalChain):
            raise ConfigError("base rail: local_chain must be an envelopay_base.local.LocalChain")
        backend = LocalBackend(local_chain)
        chain_id = local_chain.chain_id
        # The registry names the token actually deployed on this chain.
        builtin = [a for a in builtin if not (a.chain == chain and a.address is not None)]
        builtin.append(AssetInfo(chain=chain, symbol="USDC", address=local_chain.token_address, decimals=6))
    else:
        if not rpc_url:
            raise ConfigError("base rail: the rpc backend needs 'rpc_url'")
        from envelopay_base.rpc import DEFAULT_BATCH_MAX, RpcBackend

        backend = RpcBackend(str(rpc_url), client=options.get("http_client"),
                             batch_max=int(options.get("rpc_batch_max", DEFAULT_BATCH_MAX)))
        if network == "local":
            chain_id = None if options.get("chain_id") is None else int(options["chain_id"])
        else:
            chain_id = CHAIN_IDS[chain]
    assets = merge_assets(builtin, options.get("assets"))
    return BaseRail(chain=chain, backend=backend, assets=assets, chain_id=chain_id, key=key,
                    local_chain=local_chain,
                    confirm_timeout=float(options.get("confirm_timeout", 60.0)),
                    poll_interval=float(options.get("poll_interval", 0.5)))


def sign_statement_with(key: bytes | str, message: bytes) -> tuple[str, str]:
    """(the key's address, its EIP-191 personal_sign of `message`): the binding signature
    (envelopay.rails.binding), for the rail's own key and for a custodial payer's."""
    from eth_account import Account
    from eth_account.messages import encode_defunct

    signed = Account.sign_message(encode_defunct(primitive=message), private_key=key)
    return norm_address(str(Account.from_key(key).address)), "0x" + bytes(signed.signature).hex()
