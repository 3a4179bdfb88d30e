"""The wait policy (pure) and the payer's wait for its own transaction (on a real
slot-clocked Solana dev node)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

import pytest
from solders.keypair import Keypair

from envelopay.rails.finality import WaitPolicy, wait_final
from envelopay.rails.interface import Expectation

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_backoff_is_capped_and_ends_with_the_window() -> None:
    policy = WaitPolicy()
    assert policy.window("solana-local") == timedelta(seconds=60)
    assert policy.window("base") == timedelta(seconds=120)
    assert policy.window("tron-nile") == timedelta(seconds=120)
    delays = [policy.delay(n).total_seconds() for n in range(1, 7)]
    assert delays == [0.05, 0.1, 0.2, 0.2, 0.2, 0.2]
    assert policy.next_look("solana-local", T0, 1, T0) == T0 + timedelta(seconds=0.05)
    # Never past the deadline; None once it has come.
    near = T0 + timedelta(seconds=59.9)
    assert policy.next_look("solana-local", T0, 9, near) == T0 + timedelta(seconds=60)
    assert policy.next_look("solana-local", T0, 9, T0 + timedelta(seconds=60)) is None


def test_policy_from_config_options() -> None:
    p = WaitPolicy.from_options({"window_solana": 5, "window_base_local": 7, "cap": 1, "first": 0.5})
    assert p.window("solana-local") == timedelta(seconds=5)
    assert p.window("base-local") == timedelta(seconds=7) and p.window("base") == timedelta(seconds=120)
    assert p.delay(1) == timedelta(seconds=0.5) and p.delay(5) == timedelta(seconds=1)
    everywhere = WaitPolicy.from_options({"window": 3})
    assert everywhere.window("solana") == everywhere.window("anything") == timedelta(seconds=3)
    for bad in ({"first": 0}, {"cap": 0.01}, {"window": -1}, {"factor": 0.5}):
        with pytest.raises(ValueError):
            WaitPolicy.from_options(bad)


async def test_wait_final_reports_progress_until_confirmed() -> None:
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_solana import LocalSolana, make_rail
    from envelopay_solana.devnode import SlotClock, solana_rpc_handler

    chain = LocalSolana()
    clock = SlotClock(chain, slot_time=0.05, confirmed_after=4, finalized_after=12)
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    to = str(Keypair().pubkey())
    async with JsonRpcServer(solana_rpc_handler(chain, clock)) as node:
        ticking = asyncio.create_task(clock.run())
        try:
            rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url,
                              "keypair": bytes(payer), "confirm_timeout": 0})
            proof = await rail.pay(chain="solana-local", token="USDC", amount=5, recipient=to)
            lines: list[str] = []
            expectation = Expectation("solana-local", "USDC", 5, to, commitment="finalized")
            verdict = await wait_final(rail, proof, expectation, timeout=20, poll=0.01, progress=lines.append)
            _, reached = chain.lookup(proof["tx"])
            await rail.aclose()
        finally:
            ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticking
    assert verdict.ok and reached == "finalized"
    assert lines and all("needs finalized" in line for line in lines)
    assert lines[0].startswith("transaction at processed")
    assert lines[-1].startswith("transaction at confirmed")


def test_the_cap_is_per_chain_family() -> None:
    # Solana looks at most every 100 ms (a quarter slot); other chains every 200 ms.
    policy = WaitPolicy()
    assert [policy.delay(n, "solana-local").total_seconds() for n in range(1, 5)] == [0.05, 0.1, 0.1, 0.1]
    assert [policy.delay(n, "base-local").total_seconds() for n in range(1, 5)] == [0.05, 0.1, 0.2, 0.2]
    assert policy.next_look("solana", T0, 5, T0) == T0 + timedelta(seconds=0.1)
    assert policy.next_look("base", T0, 5, T0) == T0 + timedelta(seconds=0.2)
    p = WaitPolicy.from_options({"cap_solana_local": 0.5, "cap_base": 1})
    assert p.delay(9, "solana-local") == timedelta(seconds=0.5)
    assert p.delay(9, "solana") == timedelta(seconds=0.1)  # the family default stays
    assert p.delay(9, "base-local") == timedelta(seconds=1)
    everywhere = WaitPolicy.from_options({"cap": 2})
    assert everywhere.delay(9, "solana") == everywhere.delay(9, "tron") == timedelta(seconds=2)
    with pytest.raises(ValueError):
        WaitPolicy.from_options({"cap_solana": 0.01})  # below `first`
