"""The Base rail passes the envelopay.testing.rails conformance kit on both backends:
eth-tester directly, and JSON-RPC against a dev node serving the same eth-tester chain;
and over JSON-RPC against a real node, anvil, next to the eth-tester node driven the same way."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.testing.rails import RAIL_CHECKS, check_rail, run_check
from envelopay_base.devnode import base_rpc_handler
from envelopay_base.local import LocalChain

from .base_harness import BaseHarness, NodeHarness
from .nodes import NODE_KINDS, base_node


@pytest.fixture(scope="module")
def local_harness() -> BaseHarness:
    return BaseHarness.local_backend()


@pytest.fixture
async def rpc_harness() -> AsyncIterator[BaseHarness]:
    chain = LocalChain()
    async with JsonRpcServer(base_rpc_handler(chain)) as node:
        harness = BaseHarness.rpc_backend(chain, node.url)
        yield harness
        await harness._rail.aclose()


@pytest.mark.parametrize("kind", NODE_KINDS)
async def test_rpc_node(kind: str) -> None:
    """Every check on one node of each kind (one anvil start, not fourteen)."""
    async with base_node(kind) as node:  # type: ignore[arg-type]
        harness = await NodeHarness.start(node)
        try:
            assert await check_rail(lambda: harness) == list(RAIL_CHECKS)
        finally:
            await harness.rail.aclose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_local_backend(local_harness: BaseHarness, name: str) -> None:
    await run_check(name, local_harness)


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_rpc_backend(rpc_harness: BaseHarness, name: str) -> None:
    await run_check(name, rpc_harness)


async def test_check_rail_runs_every_check() -> None:
    names = await check_rail(BaseHarness.local_backend)
    assert names == list(RAIL_CHECKS)
