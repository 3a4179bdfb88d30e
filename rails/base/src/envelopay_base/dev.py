"""This distribution's dev chain (entry point group ``envelopay.devchains``, name ``base``).

`DEV_CHAIN.start` runs anvil when installed (a real EVM node, mining on ``block_time``)
with the local USDC deployed, else the eth-tester node on a `BlockClock` over JSON-RPC;
`fund` is the faucet of either; `local` opens an in-process eth-tester chain for the
demo. See `envelopay.devnet.plugins` for the contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from envelopay.devnet.plugins import LocalWallet
from envelopay.devnet.rpc_server import JsonRpcServer, ServedChain
from envelopay.errors import ConfigError, TransportError
from envelopay_base.anvil import AnvilProcess, find_anvil
from envelopay_base.devchain import DevChain, DevChainError
from envelopay_base.devnode import BlockClock, base_rpc_handler
from envelopay_base.local import LocalChain

__all__ = ["DEV_CHAIN", "BaseDevChain", "BaseLocalWorld"]


@dataclass
class _Anvil:
    url: str
    process: AnvilProcess
    facts: Mapping[str, Any]

    async def stop(self) -> None:
        self.process.stop()


@dataclass
class BaseLocalWorld:
    """An in-process eth-tester `LocalChain` behind the `LocalWorld` contract."""

    base: LocalChain = field(default_factory=LocalChain)
    chain: str = "base-local"

    def new_wallet(self, *, native: int = 0, usdc: int = 0) -> LocalWallet:
        address, key = self.base.new_wallet()
        if native or usdc:
            self.base.fund(address, eth=native, usdc=usdc)
        return LocalWallet(address, bytes.fromhex(key.removeprefix("0x")))

    def fund(self, address: str, *, native: int = 0, usdc: int = 0) -> None:
        self.base.fund(address, eth=native, usdc=usdc)

    def usdc_balance(self, address: str) -> int | None:
        return self.base.token_balance(address)

    def rail_options(self, key: bytes | None = None) -> dict[str, Any]:
        options: dict[str, Any] = {"local_chain": self.base}
        return options if key is None else {**options, "keypair": key}


class BaseDevChain:
    async def start(self, options: Mapping[str, Any]) -> _Anvil | ServedChain:
        """Options: ``port`` (0: a free one), ``block_time`` (seconds, default 2) and
        ``node``: ``auto`` (anvil when installed), ``anvil`` or ``eth-tester``."""
        port, block_time = int(options.get("port", 0)), float(options.get("block_time", 2.0))
        which = options.get("node", "auto")
        binary = find_anvil()
        if which == "anvil" and binary is None:
            raise ConfigError("anvil is not installed (scripts/services.sh installs it into tools/)")
        if binary is not None and which in ("auto", "anvil"):
            return await _start_anvil(binary, port, block_time)
        chain = LocalChain(blocks_per_tx=1)
        clock = BlockClock(chain, block_time)
        server = JsonRpcServer(base_rpc_handler(chain, clock), port=port)
        url = await server.start()
        facts = {"node": "eth-tester", "chain_id": chain.chain_id, "block_time": block_time,
                 "usdc": chain.token_address}
        return ServedChain(url, server, asyncio.create_task(clock.run()), facts)

    async def fund(self, rpc_url: str, wallet: str, *, native: int, usdc: int) -> None:
        async with DevChain(rpc_url) as dev:
            try:
                await dev.fund(wallet, eth=native, usdc=usdc)
            except DevChainError as exc:
                raise TransportError(f"the devnet's Base node refused: {exc}") from exc

    def local(self) -> BaseLocalWorld:
        return BaseLocalWorld()


async def _start_anvil(binary: str, port: int, block_time: float) -> _Anvil:
    anvil = AnvilProcess(binary=binary, port=port or None, block_time=block_time)
    await anvil.start()
    try:
        async with DevChain(anvil.url) as dev:
            usdc = await dev.deploy_token()
    except BaseException:
        anvil.stop()
        raise
    facts = {"node": "anvil", "chain_id": anvil.chain_id, "block_time": block_time, "usdc": usdc,
             "pid": anvil.pid}
    return _Anvil(anvil.url, anvil, facts)


DEV_CHAIN = BaseDevChain()
