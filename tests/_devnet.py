"""The devnet's chain and garden in this process, for tests that time the chain
themselves: a Solana dev node over JSON-RPC on a slot clock the test advances (so "not
final yet" is certain, not a race), the garden on a Unix socket, the agents' directories
written by `init --devnet` and funded by the devnet's faucet. The Base chain is named but
not run (no test here pays on it)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.devnet import registry
from envelopay.devnet.fund import fund, plan_funding
from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.devnet.state import BaseEndpoint, DevnetState, SolanaEndpoint, write_state
from envelopay.node.init import init_agent


@dataclass
class LocalDevnet:
    home: Path
    state: DevnetState
    clock: Any  # envelopay_solana.devnode.SlotClock, advanced by the test
    solana: JsonRpcServer
    garden: Any  # envelopay.mail.garden.GardenServer
    dirs: dict[str, Path]  # each agent's directory, by address


@contextlib.asynccontextmanager
async def local_devnet(tmp_path: Path, agents: Sequence[str], funded: Sequence[str], *,
                       confirmed_after: int, finalized_after: int) -> AsyncIterator[LocalDevnet]:
    """`agents` made with `init --devnet` in tmp_path/<local part>; `funded` given 1 SOL
    and 10 USDC on Solana."""
    # lazy: the Solana plugin and the garden load only when a devnet starts
    from envelopay.mail.garden import GardenServer
    from envelopay_solana import LocalSolana
    from envelopay_solana.devnode import SlotClock, solana_rpc_handler

    home = tmp_path / "devnet"
    (home / "agents").mkdir(parents=True)
    clock = SlotClock(LocalSolana(), slot_time=1.0, confirmed_after=confirmed_after,
                      finalized_after=finalized_after)
    solana = JsonRpcServer(solana_rpc_handler(clock.chain, clock))
    await solana.start()
    state = DevnetState(home=str(home), pid=os.getpid(), started=datetime.now(UTC).isoformat(),
                        solana=SolanaEndpoint(solana.url, 1.0, confirmed_after, finalized_after),
                        base=BaseEndpoint("http://127.0.0.1:9/", "eth-tester", 1, 1.0, "0x" + "00" * 20),
                        garden_socket=str(home / "garden.sock"), garden_root=str(home / "garden"),
                        agents_dir=str(home / "agents"))
    write_state(state)
    dirs = {}
    for who in agents:
        dirs[who] = tmp_path / who.split("@")[0]
        init_agent(dirs[who], address=who, devnet=state)
    for who in funded:
        await fund(state, plan_funding(home, who, sol="1", eth=None, usdc="10", chain="solana"))
    entries = registry.agent_entries(home)
    garden = GardenServer(home / "garden", sorted(registry.garden_addresses(entries)),
                          unix_path=home / "garden.sock", fsync=False,
                          accounts=registry.garden_accounts(entries))
    await garden.start()
    try:
        yield LocalDevnet(home, state, clock, solana, garden, dirs)
    finally:
        await garden.stop()
        await solana.stop()
