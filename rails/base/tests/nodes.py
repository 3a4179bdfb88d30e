"""Base dev nodes for the rail's RPC tests: anvil (a real EVM node, Foundry's) and the
eth-tester node behind envelopay's JSON-RPC server. Both are driven the same way through
`DevChain`, so one test runs against each (`NODE_KINDS`).

anvil must be installed (scripts/services.sh does it); a missing anvil fails the tests
that ask for it rather than skipping them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay_base.anvil import AnvilProcess
from envelopay_base.devchain import DevChain, NodeKind
from envelopay_base.devnode import BlockClock, base_rpc_handler
from envelopay_base.local import LocalChain

NODE_KINDS: tuple[NodeKind, ...] = ("anvil", "eth-tester")


@dataclass
class RunningNode:
    kind: NodeKind
    url: str
    dev: DevChain
    chain_id: int
    block_time: float | None


@contextlib.asynccontextmanager
async def base_node(kind: NodeKind, *, block_time: float | None = None) -> AsyncIterator[RunningNode]:
    """A fresh node with the local USDC deployed; a block per transaction unless `block_time`."""
    if kind == "anvil":
        async with AnvilProcess(block_time=block_time) as proc, DevChain(proc.url) as dev:
            await dev.deploy_token()
            yield RunningNode(kind, proc.url, dev, proc.chain_id, block_time)
        return
    chain = LocalChain(blocks_per_tx=1)
    clock = None if block_time is None else BlockClock(chain, block_time)
    async with JsonRpcServer(base_rpc_handler(chain, clock)) as server, DevChain(server.url) as dev:
        ticking = None if clock is None else asyncio.create_task(clock.run())
        try:
            yield RunningNode(kind, server.url, dev, chain.chain_id, block_time)
        finally:
            if ticking is not None:
                ticking.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticking
