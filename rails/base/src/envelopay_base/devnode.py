"""A JSON-RPC dev node over a LocalChain: the methods the Base rail's RPC backend uses.

Serve it with `envelopay.devnet.rpc_server.JsonRpcServer(base_rpc_handler(chain))` and
point an rpc rail at the URL (network "local", chain_id=chain.chain_id). Answers are
shaped like geth's: camelCase keys, hex quantities, `input` for calldata. It lets the
RPC backend run the conformance kit against real transactions, over real HTTP.

It also answers the dev-node methods `DevChain` uses (devchain.py): `web3_clientVersion`,
`evm_mine`, `evm_snapshot`, `evm_revert` (as anvil does) and the dev-only
`envelopay_fund(address, wei, usdc)`, which the faucet pays and mints and which returns
the funding transactions' hashes. With a `BlockClock` the chain mines a block every
`block_time` seconds, as a real chain does, instead of a block per transaction.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from envelopay.devnet.rpc_server import JsonRpcFault
from envelopay_base.local import LocalChain

_CAMEL = re.compile(r"_([a-z])")
_RENAME = {"data": "input"}  # eth-tester's transaction `data` is JSON-RPC's `input`


def to_json_rpc(value: Any, *, transaction: bool = False) -> Any:
    """eth-tester values → JSON-RPC wire form (hex quantities, camelCase, lists)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = _CAMEL.sub(lambda m: m.group(1).upper(), str(key))
            if transaction:
                name = _RENAME.get(name, name)
            out[name] = to_json_rpc(item)
        return out
    if isinstance(value, list | tuple):
        return [to_json_rpc(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, bytes):
        return "0x" + value.hex()
    return value


def _block_id(tag: Any) -> int | str:
    if tag in (None, "latest", "pending", "safe", "finalized"):
        return "latest"
    if tag == "earliest":
        return "earliest"
    return int(str(tag), 16)


def _nonce_block(tag: Any) -> int | str:
    return "pending" if tag == "pending" else _block_id(tag)


CLIENT_VERSION = "envelopay-devnode/eth-tester"


FAUCET_KEY = b"\x00" * 31 + b"\x01"  # eth-tester's first account, the faucet (a published test key)


class BlockClock:
    """A block every `block_time` seconds instead of a block per transaction.

    eth-tester holds at most one pending transaction per sender (a second one fails its
    nonce check against the last block), so a sender's further transactions wait here
    and enter the next block, one per sender per block. Run `run()` on the loop that
    serves the chain's JSON-RPC: eth-tester is not thread-safe."""

    def __init__(self, chain: LocalChain, block_time: float) -> None:
        if block_time <= 0:
            raise ValueError("block_time must be positive")
        self.chain = chain
        self.block_time = block_time
        self._waiting: dict[str, deque[bytes]] = {}
        self._in_block: set[str] = set()

    def submit(self, raw: bytes) -> str:
        from eth_account import Account
        from eth_utils.crypto import keccak

        sender = str(Account.recover_transaction(raw)).lower()
        if sender in self._in_block:
            self._waiting.setdefault(sender, deque()).append(raw)
            return "0x" + keccak(raw).hex().removeprefix("0x")
        tx_hash = str(self.chain.tester.send_raw_transaction("0x" + raw.hex())).lower()
        self._in_block.add(sender)
        return tx_hash

    def fund(self, address: str, *, eth: int = 0, usdc: int = 0) -> list[str]:
        """The faucet's transfers, signed here so they queue like anyone's."""
        from eth_account import Account

        from envelopay_base.rail import erc20_transfer_data

        faucet = Account.from_key(FAUCET_KEY)
        nonce = int(self.chain.tester.get_nonce(self.chain.faucet))
        nonce += 1 if self.chain.faucet.lower() in self._in_block else 0
        nonce += len(self._waiting.get(self.chain.faucet.lower(), ()))
        base = {"type": 2, "chainId": self.chain.chain_id, "maxFeePerGas": 10**10,
                "maxPriorityFeePerGas": 10**9}
        hashes = []
        if eth:
            tx = {**base, "nonce": nonce, "to": address, "value": eth, "gas": 21_000}
            hashes.append(self.submit(bytes(faucet.sign_transaction(tx).raw_transaction)))
            nonce += 1
        if usdc:
            data = "0x40c10f19" + erc20_transfer_data(address, usdc)[10:]  # mint(address,uint256)
            tx = {**base, "nonce": nonce, "to": self.chain.token_address, "value": 0, "gas": 100_000,
                  "data": data}
            hashes.append(self.submit(bytes(faucet.sign_transaction(tx).raw_transaction)))
        return hashes

    def tick(self) -> None:
        self.chain.mine(1)
        self._in_block.clear()
        for sender in list(self._waiting):
            queue = self._waiting[sender]
            self.submit(queue.popleft())
            if not queue:
                del self._waiting[sender]

    async def run(self) -> None:
        """Mine on the clock until cancelled."""
        self.chain.tester.disable_auto_mine_transactions()
        self.chain.blocks_per_tx = 1
        loop = asyncio.get_running_loop()
        next_at = loop.time() + self.block_time
        try:
            while True:
                await asyncio.sleep(max(0.0, next_at - loop.time()))
                self.tick()
                # Keep the cadence; after a stall mine one block, not a burst of them.
                next_at = max(next_at + self.block_time, loop.time())
        finally:
            self.chain.tester.enable_auto_mine_transactions()


def base_rpc_handler(chain: LocalChain, clock: BlockClock | None = None) -> Callable[[str, list[Any]], Any]:
    """handler(method, params) for JsonRpcServer, answering from `chain` (mined by `clock` if given)."""
    from eth_tester.exceptions import BlockNotFound, TransactionFailed, TransactionNotFound, ValidationError
    from eth_utils.exceptions import ValidationError as EvmValidationError

    tester = chain.tester
    refused = (TransactionFailed, ValidationError, EvmValidationError)

    def fault(exc: Exception) -> JsonRpcFault:
        text = str(exc)
        if "afford" in text or "insufficient" in text.lower():
            return JsonRpcFault(-32000, f"insufficient funds for gas * price + value: {text}")
        return JsonRpcFault(-32000, text)

    def handler(method: str, params: list[Any]) -> Any:
        try:
            if method == "eth_chainId":
                return hex(chain.chain_id)
            if method == "eth_blockNumber":
                return hex(chain.head())
            if method == "eth_getTransactionByHash":
                try:
                    return to_json_rpc(tester.get_transaction_by_hash(params[0]), transaction=True)
                except TransactionNotFound:
                    return None
            if method == "eth_getTransactionReceipt":
                try:
                    return to_json_rpc(tester.get_transaction_receipt(params[0]))
                except TransactionNotFound:
                    return None
            if method == "eth_getBlockByHash":
                try:
                    return to_json_rpc(tester.get_block_by_hash(params[0]))
                except BlockNotFound:
                    return None
            if method == "eth_getBlockByNumber":
                try:
                    return to_json_rpc(tester.get_block_by_number(_block_id(params[0] if params else None)))
                except BlockNotFound:
                    return None
            if method == "eth_getTransactionCount":
                return hex(tester.get_nonce(params[0], _nonce_block(params[1] if len(params) > 1 else None)))
            if method == "eth_getCode":
                code = tester.get_code(params[0])
                return code if isinstance(code, str) else "0x" + bytes(code).hex()
            if method == "eth_getBalance":
                return hex(tester.get_balance(params[0]))
            if method == "eth_call":
                call = {"from": chain.faucet, **params[0]}
                result = tester.call(call)
                return result if isinstance(result, str) else "0x" + bytes(result).hex()
            if method == "eth_estimateGas":
                return hex(tester.estimate_gas(dict(params[0])))
            if method == "eth_maxPriorityFeePerGas":
                return hex(10**9)
            if method == "eth_sendRawTransaction":
                raw = bytes.fromhex(str(params[0]).removeprefix("0x"))
                return chain.submit(raw) if clock is None else clock.submit(raw)
            if method == "web3_clientVersion":
                return CLIENT_VERSION
            if method == "evm_mine":
                chain.mine(1)
                return "0x0"
            if method == "evm_snapshot":
                return hex(int(tester.take_snapshot()))
            if method == "evm_revert":
                tester.revert_to_snapshot(int(str(params[0]), 16))
                return True
            if method == "envelopay_fund":
                funder = chain if clock is None else clock
                return funder.fund(str(params[0]), eth=int(str(params[1]), 16), usdc=int(str(params[2]), 16))
        except refused as exc:
            raise fault(exc) from exc
        except (IndexError, KeyError, TypeError, ValueError) as exc:
            raise JsonRpcFault(-32602, f"invalid params: {exc}") from exc
        raise JsonRpcFault(-32601, f"the method {method} does not exist/is not available")

    return handler
