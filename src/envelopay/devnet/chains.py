"""The devnet's two chain nodes, started on loopback and stopped cleanly.

Solana: LiteSVM behind envelopay's JSON-RPC server, on a slot clock. Base: anvil when
installed (a real EVM node, mining on `--block-time`), else the eth-tester node on a
block clock. Both carry the local USDC at the addresses the rails' "-local" registries
name. Each node is the dev chain its rail distribution registers (`plugins.dev_chain`):
the core imports no chain library and no rail distribution by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envelopay.devnet.plugins import RunningChain, dev_chain
from envelopay.devnet.state import BaseEndpoint, SolanaEndpoint

__all__ = ["ChainNodes", "start_chains"]


@dataclass
class ChainNodes:
    solana: SolanaEndpoint
    base: BaseEndpoint
    _running: list[RunningChain] = field(default_factory=list)

    async def stop(self) -> None:
        for node in self._running:
            await node.stop()


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
    nodes = ChainNodes(SolanaEndpoint("", slot_time, confirmed_after, finalized_after),
                       BaseEndpoint("", "", 0, block_time, ""))
    try:
        solana = await dev_chain("solana").start({
            "port": solana_port, "slot_time": slot_time, "confirmed_after": confirmed_after,
            "finalized_after": finalized_after})
        nodes._running.append(solana)
        nodes.solana = SolanaEndpoint(solana.url, slot_time, confirmed_after, finalized_after)
        base = await dev_chain("base").start({"port": base_port, "block_time": block_time, "node": base_node})
        nodes._running.append(base)
        nodes.base = BaseEndpoint(base.url, **base.facts)
    except BaseException:
        await nodes.stop()
        raise
    return nodes
