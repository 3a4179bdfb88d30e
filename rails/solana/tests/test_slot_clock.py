"""The dev node on a slot clock: slots advance on their own, and a payment's commitment
goes processed → confirmed → finalized with the configured lag, as on mainnet. The rail
over RPC sees it as pending until the commitment its expectation asks for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from solders.keypair import Keypair

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.rails.interface import Expectation, Reason
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.devnode import SlotClock, solana_rpc_handler


@contextlib.asynccontextmanager
async def timed_node(clock: SlotClock) -> AsyncIterator[str]:
    async with JsonRpcServer(solana_rpc_handler(clock.chain, clock)) as node:
        ticking = asyncio.create_task(clock.run())
        try:
            yield node.url
        finally:
            ticking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticking


async def rpc(url: str, method: str, params: list[object]) -> object:
    async with httpx.AsyncClient() as client:
        answer = (await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": method,
                                               "params": params})).json()
    assert "error" not in answer, answer
    return answer["result"]


def test_defaults_are_mainnet_like() -> None:
    clock = SlotClock(LocalSolana())
    assert (clock.slot_time, clock.confirmed_after, clock.finalized_after) == (0.4, 2, 32)
    with pytest.raises(ValueError):
        SlotClock(LocalSolana(), confirmed_after=5, finalized_after=4)


async def test_commitment_lags_the_slot_of_the_payment() -> None:
    chain = LocalSolana()
    clock = SlotClock(chain, slot_time=0.05, confirmed_after=3, finalized_after=8)
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    to = str(Keypair().pubkey())
    async with timed_node(clock) as url:
        first_slot = int(str(await rpc(url, "getSlot", [])))
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": url, "keypair": bytes(payer),
                          "confirm_timeout": 0, "poll_interval": 0.01})
        proof = await rail.pay(chain="solana-local", token="USDC", amount=77, recipient=to)
        landed = chain.lookup(proof["tx"])[0]
        assert landed is not None
        seen: list[str] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not seen or seen[-1] != "finalized":
            assert loop.time() < deadline, f"stuck at {seen[-1:]}"
            status = await rpc(url, "getSignatureStatuses", [[proof["tx"]]])
            state = status["value"][0]["confirmationStatus"]  # type: ignore[index]
            slot_now = status["context"]["slot"]  # type: ignore[index]
            age = slot_now - landed["slot"]
            # Each answer agrees with the lag rule for the slot it reports.
            expected = "finalized" if age >= 8 else "confirmed" if age >= 3 else "processed"
            assert state == expected, (state, age)
            if not seen or seen[-1] != state:
                seen.append(state)
            if state == "processed":
                pending = await rail.verify(proof, Expectation("solana-local", "USDC", 77, to))
                # (the slot may have moved between the two calls: still not final, or final)
                assert pending.status in ("pending", "ok")
            if state == "confirmed":
                final = await rail.verify(proof, Expectation("solana-local", "USDC", 77, to,
                                                             commitment="finalized"))
                assert final.status in ("pending", "ok")
                if final.status == "pending":
                    assert final.reason is Reason.NOT_FINAL
            await asyncio.sleep(0.01)
        ok = await rail.verify(proof, Expectation("solana-local", "USDC", 77, to, commitment="finalized"))
        await rail.aclose()
    assert seen == ["processed", "confirmed", "finalized"]
    assert ok.ok and ok.observed_amount == 77
    assert chain.slot() >= first_slot + 8  # slots advanced on the clock, not per transaction


async def test_pay_waits_for_confirmed_under_the_clock() -> None:
    chain = LocalSolana()
    clock = SlotClock(chain, slot_time=0.05, confirmed_after=4, finalized_after=10)
    payer = chain.new_wallet(sol=10**10)
    to = chain.new_wallet(sol=10**9)
    async with timed_node(clock) as url:
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": url, "keypair": bytes(payer),
                          "poll_interval": 0.01})
        proof = await rail.pay(chain="solana-local", token="SOL", amount=1_000, recipient=str(to.pubkey()))
        doc, reached = chain.lookup(proof["tx"])
        assert doc is not None and reached in ("confirmed", "finalized")
        assert chain.slot() - doc["slot"] >= 4
        verdict = await rail.verify(proof, Expectation("solana-local", "SOL", 1_000, str(to.pubkey())))
        await rail.aclose()
    assert verdict.ok
