"""The Base rail passes the envelopay.testing.rails conformance kit on both backends:
eth-tester directly, and JSON-RPC against a dev node serving the same eth-tester chain."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from envelopay.testing.rails import RAIL_CHECKS, check_rail, run_check
from envelopay.testing.rpc_server import JsonRpcServer
from envelopay_base.devnode import base_rpc_handler
from envelopay_base.local import LocalChain

from .base_harness import BaseHarness


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


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_local_backend(local_harness: BaseHarness, name: str) -> None:
    await run_check(name, local_harness)


@pytest.mark.parametrize("name", list(RAIL_CHECKS))
async def test_rpc_backend(rpc_harness: BaseHarness, name: str) -> None:
    await run_check(name, rpc_harness)


async def test_check_rail_runs_every_check() -> None:
    names = await check_rail(BaseHarness.local_backend)
    assert names == list(RAIL_CHECKS)
