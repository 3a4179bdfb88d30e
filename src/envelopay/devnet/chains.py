"""The devnet's two chain nodes, started on loopback and stopped cleanly.

Solana: LiteSVM behind envelopay's JSON-RPC server, on a `SlotClock`. Base: anvil when
installed (a real EVM node, mining on `--block-time`), else the eth-tester node on a
`BlockClock`. Both carry the local USDC at the addresses the rails' "-local" registries
name. Chain libraries are imported here, lazily: the rest of the core stays chain-free.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

from envelopay.devnet.state import BaseEndpoint, SolanaEndpoint

__all__ = ["ChainNodes", "start_chains"]


@dataclass
class ChainNodes:
    solana: SolanaEndpoint
    base: BaseEndpoint
    _servers: list[Any] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _anvil: Any = None

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for server in self._servers:
            await server.stop()
        if self._anvil is not None:
            self._anvil.stop()


async def start_chains(
    *,
    solana_port: int = 0,
    base_port: int = 0,
    slot_time: float = 0.4,
    confirmed_after: int = 2,
    finalized_after: int = 32,
    block_time: float = 2.0,
    base_node: str = "auto",  # auto | anvil | eth-tester
) -> ChainNodes:
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_solana.devnode import SlotClock, solana_rpc_handler
    from envelopay_solana.local import LocalSolana

    nodes = ChainNodes(SolanaEndpoint("", slot_time, confirmed_after, finalized_after),
                       BaseEndpoint("", "", 0, block_time, ""))
    try:
        clock = SlotClock(LocalSolana(), slot_time=slot_time, confirmed_after=confirmed_after,
                          finalized_after=finalized_after)
        server = JsonRpcServer(solana_rpc_handler(clock.chain, clock), port=solana_port)
        url = await server.start()
        nodes._servers.append(server)
        nodes._tasks.append(asyncio.create_task(clock.run()))
        nodes.solana = SolanaEndpoint(url, slot_time, confirmed_after, finalized_after)
        nodes.base = await _start_base(nodes, base_port, block_time, base_node)
    except BaseException:
        await nodes.stop()
        raise
    return nodes


async def _start_base(nodes: ChainNodes, port: int, block_time: float, which: str) -> BaseEndpoint:
    from envelopay.errors import ConfigError
    from envelopay_base.anvil import AnvilProcess, find_anvil
    from envelopay_base.devchain import DevChain

    binary = find_anvil()
    if which == "anvil" and binary is None:
        raise ConfigError("anvil is not installed (scripts/services.sh installs it into tools/)")
    if binary is not None and which in ("auto", "anvil"):
        anvil = AnvilProcess(binary=binary, port=port or None, block_time=block_time)
        await anvil.start()
        nodes._anvil = anvil
        async with DevChain(anvil.url) as dev:
            usdc = await dev.deploy_token()
        return BaseEndpoint(anvil.url, "anvil", anvil.chain_id, block_time, usdc, anvil.pid)
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_base.devnode import BlockClock, base_rpc_handler
    from envelopay_base.local import LocalChain

    chain = LocalChain(blocks_per_tx=1)
    clock = BlockClock(chain, block_time)
    server = JsonRpcServer(base_rpc_handler(chain, clock), port=port)
    url = await server.start()
    nodes._servers.append(server)
    nodes._tasks.append(asyncio.create_task(clock.run()))
    return BaseEndpoint(url, "eth-tester", chain.chain_id, block_time, chain.token_address)
