"""Control of a Base dev node over JSON-RPC: anvil, or envelopay's eth-tester node.

Tests, `envelopay devnet` and `envelopay fund` use one `DevChain` whichever node runs.
The two differ only in how they mint money: anvil through its cheat methods
(`anvil_setBalance`, `anvil_impersonateAccount`), our eth-tester node through the
dev-only method `envelopay_fund` (see devnode.py). Mining and snapshots use the
methods both share: `evm_mine`, `evm_snapshot`, `evm_revert`.

The local token lives at `assets.USDC_LOCAL` on both: it is the first contract that
eth-tester's faucet account (`FAUCET`) deploys, and on anvil that account is
impersonated to deploy it with the same nonce.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Literal

import httpx

from envelopay_base.assets import USDC_LOCAL
from envelopay_base.local import LOCAL_TOKEN_DECIMALS, LOCAL_TOKEN_NAME, LOCAL_TOKEN_SYMBOL, token_artifact

# eth-tester's first account (private key 0x…01): the local chain's faucet and token minter.
FAUCET = "0x7E5F4552091A69125d5DfCb7b8C2659029395Bdf"
_MINT = "40c10f19"  # mint(address,uint256)
NodeKind = Literal["anvil", "eth-tester"]


class DevChainError(RuntimeError):
    """The dev node refused a control call or did not answer."""


def _word(value: int | str) -> str:
    if isinstance(value, str):
        return value.lower().removeprefix("0x").rjust(64, "0")
    return f"{value:064x}"


class DevChain:
    """`DevChain(url)`: fund, mine, snapshot and revert on a Base dev node."""

    def __init__(self, url: str, *, client: httpx.AsyncClient | None = None, timeout: float = 10.0) -> None:
        self.url = url
        self._own = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._ids = itertools.count(1)
        self._kind: NodeKind | None = None

    async def aclose(self) -> None:
        if self._own:
            await self._client.aclose()

    async def __aenter__(self) -> DevChain:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def rpc(self, method: str, params: list[Any] | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params or []}
        try:
            answer = await self._client.post(self.url, json=body)
            doc = answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise DevChainError(f"{method}: the dev node at {self.url} did not answer ({exc})") from exc
        if not isinstance(doc, dict):
            raise DevChainError(f"{method}: malformed answer")
        if doc.get("error") is not None:
            raise DevChainError(f"{method}: {doc['error'].get('message', doc['error'])}")
        return doc.get("result")

    async def kind(self) -> NodeKind:
        if self._kind is None:
            version = str(await self.rpc("web3_clientVersion"))
            self._kind = "anvil" if version.lower().startswith("anvil") else "eth-tester"
        return self._kind

    async def chain_id(self) -> int:
        return int(await self.rpc("eth_chainId"), 16)

    async def head(self) -> int:
        return int(await self.rpc("eth_blockNumber"), 16)

    async def receipt(self, tx_hash: str) -> dict[str, Any] | None:
        result = await self.rpc("eth_getTransactionReceipt", [tx_hash])
        return result if isinstance(result, dict) else None

    async def wait_receipt(
        self, tx_hash: str, *, timeout: float = 30.0, poll: float = 0.02
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            receipt = await self.receipt(tx_hash)
            if receipt is not None and receipt.get("blockNumber") is not None:
                return receipt
            if loop.time() > deadline:
                raise DevChainError(f"{tx_hash} not mined within {timeout}s")
            await asyncio.sleep(poll)

    async def send_raw(self, raw: bytes) -> str:
        return str(await self.rpc("eth_sendRawTransaction", ["0x" + raw.hex()])).lower()

    async def mine(self, blocks: int = 1) -> None:
        for _ in range(blocks):
            await self.rpc("evm_mine")

    async def snapshot(self) -> str:
        return str(await self.rpc("evm_snapshot"))

    async def revert(self, snapshot: str) -> bool:
        return bool(await self.rpc("evm_revert", [snapshot]))

    async def deploy_token(self) -> str:
        """Deploy the local USDC at `USDC_LOCAL` (anvil; the eth-tester node has it already)."""
        if await self.kind() != "anvil":
            return USDC_LOCAL
        if await self.rpc("eth_getCode", [USDC_LOCAL, "latest"]) not in (None, "0x", "0x0"):
            return USDC_LOCAL
        from eth_abi.abi import encode

        artifact = token_artifact()
        args = encode(["string", "string", "uint8"],
                      [LOCAL_TOKEN_NAME, LOCAL_TOKEN_SYMBOL, LOCAL_TOKEN_DECIMALS])
        await self.rpc("anvil_setBalance", [FAUCET, hex(10**24)])
        await self.rpc("anvil_impersonateAccount", [FAUCET])
        tx_hash = await self.rpc("eth_sendTransaction", [{
            "from": FAUCET, "data": artifact["bytecode"] + args.hex(), "gas": hex(3_000_000)}])
        receipt = await self.wait_receipt(str(tx_hash))
        address = str(receipt.get("contractAddress") or "")
        if address.lower() != USDC_LOCAL.lower():
            raise DevChainError(f"the token landed at {address}, not {USDC_LOCAL} (faucet nonce was not 0)")
        return USDC_LOCAL

    async def fund(self, address: str, *, eth: int = 0, usdc: int = 0) -> None:
        """Give `address` `eth` wei and mint it `usdc` smallest units; returns once mined."""
        if eth < 0 or usdc < 0:
            raise ValueError("amounts must not be negative")
        hashes: list[str] = []
        if await self.kind() == "anvil":
            if eth:
                held = int(await self.rpc("eth_getBalance", [address, "latest"]), 16)
                await self.rpc("anvil_setBalance", [address, hex(held + eth)])
            if usdc:
                await self.rpc("anvil_impersonateAccount", [FAUCET])
                data = "0x" + _MINT + _word(address) + _word(usdc)
                hashes.append(str(await self.rpc("eth_sendTransaction", [
                    {"from": FAUCET, "to": USDC_LOCAL, "data": data, "gas": hex(100_000)}])))
        else:
            hashes = [str(h) for h in await self.rpc("envelopay_fund", [address, hex(eth), hex(usdc)])]
        for tx_hash in hashes:
            receipt = await self.wait_receipt(tx_hash)
            if int(str(receipt.get("status", "0x0")), 16) != 1:
                raise DevChainError(f"funding transaction {tx_hash} reverted")

    async def token_balance(self, address: str) -> int:
        answer = await self.rpc("eth_call", [{"to": USDC_LOCAL, "data": "0x70a08231" + _word(address)},
                                             "latest"])
        return int(str(answer), 16)

    async def eth_balance(self, address: str) -> int:
        return int(await self.rpc("eth_getBalance", [address, "latest"]), 16)
