"""The local Base chain: eth-tester (py-evm) in-process, with a real ERC-20 deployed at start.

`LocalChain` is the shared chain object (one per process or test); `LocalBackend` is the
rail's view of it. The token is the Vyper contract in rails/base/contracts, loaded from the
committed artifact (contracts/token.json) — nothing is compiled at runtime.

eth-tester mines one block per transaction. A real chain keeps producing blocks; here
`blocks_per_tx` (default 2, the default expectation's confirmations) makes every
submitted transaction be followed by empty blocks up to that depth, so a payment made
through the rail is final at once. Tests of "seen but not final" set it to 1 and call
`mine(n)` themselves.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any, cast

from envelopay_base.backend import ChainUnavailable, Fees, NodeRefused, Reading

LOCAL_TOKEN_NAME = "USD Coin (envelopay local)"
LOCAL_TOKEN_SYMBOL = "USDC"
LOCAL_TOKEN_DECIMALS = 6

_CAMEL = re.compile(r"_([a-z])")


@cache
def token_artifact() -> dict[str, Any]:
    """ABI and bytecode of the local ERC-20, compiled by rails/base/contracts/build.py."""
    text = resources.files("envelopay_base").joinpath("contracts/token.json").read_text()
    return cast(dict[str, Any], json.loads(text))


def _rpc_shape(value: Any) -> Any:
    """eth-tester's snake_case dicts → JSON-RPC camelCase (values stay ints/hex strings)."""
    if isinstance(value, Mapping):
        return {_CAMEL.sub(lambda m: m.group(1).upper(), str(k)): _rpc_shape(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rpc_shape(v) for v in value]
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


class LocalChain:
    """An in-process EVM chain with a funded faucet account and a 6-decimal USDC token."""

    def __init__(
        self,
        *,
        rng: Callable[[int], bytes] = os.urandom,
        blocks_per_tx: int = 2,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        from eth_tester import EthereumTester, PyEVMBackend
        from web3 import EthereumTesterProvider, Web3

        if blocks_per_tx < 1:
            raise ValueError("blocks_per_tx must be at least 1 (the transaction's own block)")
        self._rng = rng
        self._clock = clock
        self.blocks_per_tx = blocks_per_tx
        self.tester = EthereumTester(PyEVMBackend())
        self.w3 = Web3(EthereumTesterProvider(self.tester))
        self.chain_id: int = int(self.w3.eth.chain_id)
        self.faucet: str = str(self.tester.get_accounts()[0])
        artifact = token_artifact()
        factory = self.w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
        tx_hash = factory.constructor(LOCAL_TOKEN_NAME, LOCAL_TOKEN_SYMBOL, LOCAL_TOKEN_DECIMALS).transact(
            {"from": self.faucet}
        )
        receipt = self.w3.eth.get_transaction_receipt(tx_hash)
        self.token_address: str = str(receipt["contractAddress"])
        self.token = self.w3.eth.contract(
            address=Web3.to_checksum_address(self.token_address), abi=artifact["abi"]
        )

    # -- test and demo helpers -------------------------------------------------------------

    def new_wallet(self) -> tuple[str, str]:
        """A fresh (address, 0x private key) from the injected randomness source."""
        from eth_account import Account

        account = Account.from_key(self._rng(32))
        return str(account.address), "0x" + bytes(account.key).hex()

    def fund(self, address: str, *, eth: int = 0, usdc: int = 0) -> list[str]:
        """Faucet: send `eth` wei and mint `usdc` smallest units to `address`; the hashes."""
        from web3 import Web3
        from web3.types import Wei

        to = Web3.to_checksum_address(address)
        hashes: list[bytes] = []
        if eth:
            sent = self.w3.eth.send_transaction({"from": self.faucet, "to": to, "value": Wei(eth)})
            hashes.append(bytes(sent))
        if usdc:
            hashes.append(bytes(self.token.functions.mint(to, usdc).transact({"from": self.faucet})))
        return ["0x" + h.hex() for h in hashes]

    def mine(self, blocks: int = 1) -> None:
        self.tester.mine_blocks(blocks)

    def submit(self, raw: bytes) -> str:
        """Send a signed transaction (mined at once), then advance `blocks_per_tx - 1` blocks.

        Raises eth-tester / py-evm validation errors for a transaction the chain refuses."""
        self._follow_clock()
        tx_hash = str(self.tester.send_raw_transaction("0x" + raw.hex())).lower()
        if self.blocks_per_tx > 1:
            self.tester.mine_blocks(self.blocks_per_tx - 1)
        return tx_hash

    def head(self) -> int:
        return int(self.tester.get_block_by_number("latest")["number"])

    def token_balance(self, address: str) -> int:
        from web3 import Web3

        return int(self.token.functions.balanceOf(Web3.to_checksum_address(address)).call())

    def eth_balance(self, address: str) -> int:
        return int(self.tester.get_balance(address))

    def _follow_clock(self) -> None:
        # With an injected clock, block times follow it (forward only: a chain cannot go back).
        if self._clock is None:
            return
        target = int(self._clock().timestamp())
        if target > int(self.tester.get_block_by_number("pending")["timestamp"]):
            self.tester.time_travel(target)

    def time_travel(self, timestamp: int) -> None:
        """Move the next block's timestamp forward (eth-tester mines a block to do it)."""
        self.tester.time_travel(timestamp)

    # -- reads in JSON-RPC shape ----------------------------------------------------------

    def read(self, tx_hash: str) -> Reading:
        from eth_tester.exceptions import BlockNotFound, TransactionNotFound

        head = self.head()
        try:
            tx: dict[str, Any] | None = _rpc_shape(self.tester.get_transaction_by_hash(tx_hash))
        except TransactionNotFound:
            tx = None
        receipt: dict[str, Any] | None = None
        block: dict[str, Any] | None = None
        if tx is not None:
            try:
                receipt = _rpc_shape(self.tester.get_transaction_receipt(tx_hash))
            except TransactionNotFound:
                receipt = None
            if receipt is not None and receipt.get("blockHash") is not None:
                try:
                    raw_block = self.tester.get_block_by_hash(receipt["blockHash"])
                except BlockNotFound:
                    raw_block = None
                if raw_block is not None:
                    block = {"hash": raw_block["hash"], "number": raw_block["number"],
                             "timestamp": raw_block["timestamp"]}
        return Reading(self.chain_id, head, tx, receipt, block)


class LocalBackend:
    """The Backend protocol over a shared LocalChain (calls are synchronous and fast)."""

    def __init__(self, chain: LocalChain) -> None:
        self.chain = chain

    async def aclose(self) -> None:
        return None

    async def chain_id(self) -> int:
        return self.chain.chain_id

    async def read(self, tx_hash: str) -> Reading:
        return self.chain.read(tx_hash)

    async def receipt(self, tx_hash: str) -> Mapping[str, Any] | None:
        from eth_tester.exceptions import TransactionNotFound

        try:
            receipt: dict[str, Any] | None = _rpc_shape(self.chain.tester.get_transaction_receipt(tx_hash))
        except TransactionNotFound:
            return None
        return receipt

    async def nonce(self, address: str) -> int:
        return int(self.chain.tester.get_nonce(address))

    async def balance(self, address: str) -> int:
        return self.chain.eth_balance(address)

    async def call(self, to: str, data: str) -> str:
        # eth-tester insists on a sender even for a read; the faucet is as good as any.
        result = self.chain.tester.call({"from": self.chain.faucet, "to": to, "data": data})
        return result if isinstance(result, str) else "0x" + bytes(result).hex()

    async def estimate_gas(self, tx: Mapping[str, Any]) -> int:
        from eth_tester.exceptions import TransactionFailed
        from eth_utils.exceptions import ValidationError

        try:
            return int(self.chain.tester.estimate_gas(dict(tx)))
        except (TransactionFailed, ValidationError) as exc:
            raise ChainUnavailable(f"gas estimation failed: {exc}") from exc

    async def fees(self) -> Fees:
        latest = self.chain.tester.get_block_by_number("latest")
        base_fee = int(latest.get("base_fee_per_gas") or 0)
        priority = 10**9
        return Fees(max_fee_per_gas=2 * base_fee + priority, max_priority_fee_per_gas=priority)

    async def send_raw(self, raw: bytes) -> str:
        from eth_tester.exceptions import TransactionFailed, ValidationError
        from eth_utils.exceptions import ValidationError as EvmValidationError

        try:
            return self.chain.submit(raw)
        except (TransactionFailed, ValidationError, EvmValidationError) as exc:
            raise NodeRefused(f"transaction refused: {exc}") from exc
