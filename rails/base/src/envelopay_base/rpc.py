"""JSON-RPC backend over HTTP (plain httpx; one pooled AsyncClient per backend).

Verification costs one batched round trip (chain id, head, transaction, receipt) and,
unless the block is cached, one more for the block's timestamp. Blocks are cached by
hash: a block hash names immutable contents, so the cache can never be stale.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import httpx

from envelopay_base.backend import ChainUnavailable, Fees, Reading
from envelopay_base.verify import quantity

DEFAULT_TIMEOUT = 10.0
BLOCK_CACHE_SIZE = 4096


class RpcError(ChainUnavailable):
    """The node answered with a JSON-RPC error object."""

    def __init__(self, method: str, error: Any) -> None:
        code = error.get("code") if isinstance(error, Mapping) else None
        message = error.get("message") if isinstance(error, Mapping) else error
        super().__init__(f"{method}: rpc error {code}: {message}")
        self.code = code


class RpcBackend:
    """Reads and submits through one JSON-RPC endpoint."""

    def __init__(
        self,
        url: str,
        *,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_connections: int = 100,
    ) -> None:
        self.url = url
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._ids = itertools.count(1)
        self._blocks: OrderedDict[str, Mapping[str, Any]] = OrderedDict()

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def batch(self, calls: list[tuple[str, list[Any]]]) -> list[Any]:
        """Send calls as one JSON-RPC batch; results in call order. Errors raise ChainUnavailable."""
        ids = [next(self._ids) for _ in calls]
        payload = [
            {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
            for i, (method, params) in zip(ids, calls, strict=True)
        ]
        body = await self._post(payload if len(calls) > 1 else payload[0])
        answers = body if isinstance(body, list) else [body]
        by_id: dict[Any, Mapping[str, Any]] = {}
        for answer in answers:
            if not isinstance(answer, Mapping):
                raise ChainUnavailable(f"malformed JSON-RPC answer: {str(answer)[:80]!r}")
            if answer.get("id") is None and "error" in answer:
                raise RpcError(calls[0][0], answer["error"])  # batch refused as a whole
            by_id[answer.get("id")] = answer
        results: list[Any] = []
        for i, (method, _) in zip(ids, calls, strict=True):
            answer = by_id.get(i)
            if answer is None:
                raise ChainUnavailable(f"{method}: no answer in the batch")
            if answer.get("error") is not None:
                raise RpcError(method, answer["error"])
            if "result" not in answer:
                raise ChainUnavailable(f"{method}: answer has neither result nor error")
            results.append(answer["result"])
        return results

    async def _post(self, payload: Any) -> Any:
        try:
            response = await self._client.post(self.url, json=payload)
        except httpx.HTTPError as exc:
            raise ChainUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ChainUnavailable(f"HTTP {response.status_code} from the node")
        try:
            return response.json()
        except ValueError as exc:
            raise ChainUnavailable("node answered with something other than JSON") from exc

    async def one(self, method: str, params: list[Any]) -> Any:
        return (await self.batch([(method, params)]))[0]

    async def chain_id(self) -> int:
        return self._quantity(await self.one("eth_chainId", []), "eth_chainId")

    async def read(self, tx_hash: str) -> Reading:
        chain_hex, head_hex, tx, receipt = await self.batch(
            [
                ("eth_chainId", []),
                ("eth_blockNumber", []),
                ("eth_getTransactionByHash", [tx_hash]),
                ("eth_getTransactionReceipt", [tx_hash]),
            ]
        )
        if tx is not None and not isinstance(tx, Mapping):
            raise ChainUnavailable("eth_getTransactionByHash: not an object")
        if receipt is not None and not isinstance(receipt, Mapping):
            raise ChainUnavailable("eth_getTransactionReceipt: not an object")
        block = None
        if receipt is not None and receipt.get("blockHash") is not None:
            block = await self._block(str(receipt["blockHash"]).lower(), receipt.get("blockNumber"))
        return Reading(self._quantity(chain_hex, "eth_chainId"), self._quantity(head_hex, "eth_blockNumber"),
                       tx, receipt, block)

    async def _block(self, block_hash: str, number: Any) -> Mapping[str, Any] | None:
        cached = self._blocks.get(block_hash)
        if cached is not None:
            self._blocks.move_to_end(block_hash)
            return cached
        block = await self.one("eth_getBlockByHash", [block_hash, False])
        if block is None:
            return None  # reorged away between the two calls; the check reports it
        if not isinstance(block, Mapping) or str(block.get("hash", "")).lower() != block_hash:
            raise ChainUnavailable("eth_getBlockByHash answered for another block")
        # Keep only what verification reads: the cache stays small.
        slim = {"hash": block_hash, "number": block.get("number", number),
                "timestamp": block.get("timestamp")}
        self._blocks[block_hash] = slim
        if len(self._blocks) > BLOCK_CACHE_SIZE:
            self._blocks.popitem(last=False)
        return slim

    async def nonce(self, address: str) -> int:
        return self._quantity(await self.one("eth_getTransactionCount", [address, "pending"]), "nonce")

    async def balance(self, address: str) -> int:
        return self._quantity(await self.one("eth_getBalance", [address, "latest"]), "balance")

    async def call(self, to: str, data: str) -> str:
        result = await self.one("eth_call", [{"to": to, "data": data}, "latest"])
        if not isinstance(result, str):
            raise ChainUnavailable("eth_call: not hex data")
        return result

    async def estimate_gas(self, tx: Mapping[str, Any]) -> int:
        return self._quantity(await self.one("eth_estimateGas", [dict(tx)]), "eth_estimateGas")

    async def fees(self) -> Fees:
        latest, tip = await self.batch(
            [("eth_getBlockByNumber", ["latest", False]), ("eth_maxPriorityFeePerGas", [])]
        )
        if not isinstance(latest, Mapping):
            raise ChainUnavailable("eth_getBlockByNumber(latest): not an object")
        base_fee = self._quantity(latest.get("baseFeePerGas", "0x0"), "baseFeePerGas")
        priority = self._quantity(tip, "eth_maxPriorityFeePerGas")
        # Headroom for two blocks of base-fee growth (12.5% each), as wallets do.
        return Fees(max_fee_per_gas=2 * base_fee + priority, max_priority_fee_per_gas=priority)

    async def send_raw(self, raw: bytes) -> str:
        result = await self.one("eth_sendRawTransaction", ["0x" + raw.hex()])
        if not isinstance(result, str):
            raise ChainUnavailable("eth_sendRawTransaction: no hash returned")
        return result.lower()

    @staticmethod
    def _quantity(value: Any, field: str) -> int:
        try:
            return quantity(value, field)
        except ValueError as exc:
            raise ChainUnavailable(str(exc)) from exc
