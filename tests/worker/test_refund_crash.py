"""Failed paid work refunds once across a SIGKILL, on both chains and both ledgers: a
worker process settling a failed paid job is killed after signing its refund (before the
broadcast) or after broadcasting it (before recording it); the next process recovers the
refund from the ledger and the chain — the same signed transaction, never a second one —
and the buyer's balance has grown by the amount exactly once. The chains are served over
JSON-RPC (LiteSVM, eth-tester) so that every process sees one chain."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envelopay.devnet.plugins import LocalWorld, dev_chain
from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.ledger.refunds import RefundBook
from envelopay.ledger.sqlite import SqliteStore

CHILD = Path(__file__).with_name("_refund_child.py")
USDC = 1_000_000
LEASE_S = 1.0  # _refund_child.py's lease


def _handler(world: Any) -> Callable[[str, list[Any]], Any]:
    if world.chain.startswith("solana"):
        from envelopay_solana.devnode import solana_rpc_handler

        return solana_rpc_handler(world.sol)
    from envelopay_base.devnode import base_rpc_handler

    return base_rpc_handler(world.base)


def _options(world: Any, url: str) -> dict[str, Any]:
    opts: dict[str, Any] = {"backend": "rpc", "rpc_url": url, "network": "local", "poll_interval": 0.05,
                            "confirm_timeout": 20}
    if world.chain.startswith("base"):
        opts["chain_id"] = world.base.chain_id
        opts["assets"] = {"base-local": {"USDC": {"address": world.base.token_address, "decimals": 6}}}
    return opts


async def _run(
    ledger: str, world: LocalWorld, url: str, key: bytes, payer: str, crash: str
) -> tuple[int, str]:
    # The child imports only installed packages (envelopay and its rails): no import path to hand it.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CHILD), ledger, world.chain, json.dumps(_options(world, url)), key.hex(), payer,
        str(USDC), crash, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()[-2000:]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("chain", ["solana", "base"])
@pytest.mark.parametrize("point", ["after_sign", "after_broadcast"])
async def test_a_refund_killed_mid_way_is_paid_exactly_once_after_restart(
    backend: str, chain: str, point: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    world = dev_chain(chain).local()
    native = 10**18 if chain == "base" else 2 * 10**9
    worker = world.new_wallet(native=native, usdc=5 * USDC)
    buyer = world.new_wallet(native=native)
    ledger = str(tmp_path / "ledger.db") if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    async with JsonRpcServer(_handler(world)) as node:
        code, said = await _run(ledger, world, node.url, worker.key, buyer.address, point)
        assert code == -9, said  # killed at the point
        assert (world.usdc_balance(buyer.address) or 0) == (USDC if point == "after_broadcast" else 0)
        # The killed process's claim holds until its lease (1 s) ends: only then may another
        # process take the refund over (one owner per process, SPEC "Refunds").
        await asyncio.sleep(LEASE_S + 0.2)
        code, said = await _run(ledger, world, node.url, worker.key, buyer.address, "-")
        assert code == 0, said
        settled = json.loads(said.splitlines()[0])
        assert settled["state"] == "refunded" and settled["oops"]["refund"]["amount"] == str(USDC)
        assert world.usdc_balance(buyer.address) == USDC  # once
        code, said = await _run(ledger, world, node.url, worker.key, buyer.address, "-")  # asked again
        assert code == 0 and json.loads(said.splitlines()[0])["oops"] == settled["oops"], said
        assert world.usdc_balance(buyer.address) == USDC
    if backend == "sqlite":
        store = SqliteStore(ledger)
        row = RefundBook(store, now=datetime.now(UTC)).get("job:job_crash")
        store.close()
        assert row is not None and row.status == "paid" and row.attempts >= 2
