"""The Solana rail passes the envelopay.testing.rails conformance kit on both backends:
LiteSVM directly, and JSON-RPC against a dev node serving the same LiteSVM chain."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.testing.rails import RAIL_CHECKS, check_rail, run_check
from envelopay_solana import LocalSolana
from envelopay_solana.devnode import solana_rpc_handler

from .solana_harness import RpcSolanaHarness, SolanaHarness


@pytest.fixture(scope="module")
def local_harness() -> SolanaHarness:
    return SolanaHarness.local_backend()


@pytest.fixture
async def rpc_harness() -> AsyncIterator[RpcSolanaHarness]:
    chain = LocalSolana()
    async with JsonRpcServer(solana_rpc_handler(chain)) as node:
        harness = RpcSolanaHarness.over(chain, node.url)
        yield harness
        await harness._rail.aclose()


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_local_backend(local_harness: SolanaHarness, name: str) -> None:
    await run_check(name, local_harness)


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_rpc_backend(rpc_harness: RpcSolanaHarness, name: str) -> None:
    await run_check(name, rpc_harness)


async def test_check_rail_runs_every_check() -> None:
    names = await check_rail(SolanaHarness.local_backend)
    assert names == list(RAIL_CHECKS)
