"""The JSON-RPC client: same-turn calls share one batch, answers go to their callers,
errors stay per call, and both transports work against a real loopback node."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from envelopay.devnet.rpc_server import JsonRpcFault, JsonRpcServer
from envelopay.errors import TransportError
from envelopay.rails.interface import Expectation
from envelopay.testing.rails import RAIL_CHECKS, run_check
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.rpc import RpcError, SolanaRpc

from .solana_harness import RpcSolanaHarness

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "rpc" / "solana"
URL = "https://rpc.example.test/"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


async def test_concurrent_verifications_travel_as_one_batch() -> None:
    cases = [load(n) for n in ("success_sol", "success_usdc", "token2022", "wrong_mint")]
    by_sig = {c["signature"]: c["responses"]["getTransaction"]["result"] for c in cases}
    bodies: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        calls = body if isinstance(body, list) else [body]
        out = [{"jsonrpc": "2.0", "id": c["id"], "result": by_sig[c["params"][0]]} for c in calls]
        return httpx.Response(200, json=out if isinstance(body, list) else out[0])

    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    with respx.mock() as router:
        router.post(URL).mock(side_effect=answer)
        verdicts = await asyncio.gather(*(
            rail.verify({"tx": c["signature"]}, Expectation(**c["expectation"])) for c in cases))
    await rail.aclose()
    assert len(bodies) == 1 and isinstance(bodies[0], list) and len(bodies[0]) == 4
    assert [v.status for v in verdicts] == ["ok", "ok", "ok", "rejected"]
    assert [v.proof_key for v in verdicts[:3]] == [c["signature"] for c in cases[:3]]


async def test_batch_max_splits_and_one_disables_batching() -> None:
    seen: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls = body if isinstance(body, list) else [body]
        seen.append(len(calls) if isinstance(body, list) else 0)
        out = [{"jsonrpc": "2.0", "id": c["id"], "result": {"value": c["params"][0]}} for c in calls]
        return httpx.Response(200, json=out if isinstance(body, list) else out[0])

    # 0 = a plain (unbatched) request: a lone call never goes as a batch
    for batch_max, expected in ((3, [3, 3, 0]), (1, [0] * 7)):
        seen.clear()
        rpc = SolanaRpc(URL, batch_max=batch_max)
        with respx.mock() as router:
            router.post(URL).mock(side_effect=answer)
            results = await asyncio.gather(*(rpc.call("getBalance", [f"w{i}"]) for i in range(7)))
        await rpc.aclose()
        assert [r["value"] for r in results] == [f"w{i}" for i in range(7)]
        assert sorted(seen, reverse=True) == expected


async def test_errors_stay_with_their_call() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        calls = json.loads(request.content)
        out: list[dict[str, Any]] = []
        for c in calls:
            if c["params"][0] == "bad":
                error = {"code": -32602, "message": "Invalid param"}
                out.append({"jsonrpc": "2.0", "id": c["id"], "error": error})
            elif c["params"][0] == "lost":
                continue  # the node dropped this one from the batch answer
            else:
                out.append({"jsonrpc": "2.0", "id": c["id"], "result": 7})
        return httpx.Response(200, json=out)

    rpc = SolanaRpc(URL)
    with respx.mock() as router:
        router.post(URL).mock(side_effect=answer)
        good, bad, lost = await asyncio.gather(
            *(rpc.call("getBalance", [which]) for which in ("good", "bad", "lost")), return_exceptions=True)
    await rpc.aclose()
    assert good == 7
    assert isinstance(bad, RpcError) and bad.code == -32602
    assert isinstance(lost, TransportError) and not isinstance(lost, RpcError)


async def test_http_failure_fails_every_call_of_the_batch() -> None:
    rpc = SolanaRpc(URL)
    with respx.mock() as router:
        router.post(URL).mock(return_value=httpx.Response(502, text="bad gateway"))
        results = await asyncio.gather(*(rpc.call("getBalance", [str(i)]) for i in range(3)),
                                       return_exceptions=True)
    await rpc.aclose()
    assert all(isinstance(r, TransportError) and "HTTP 502" in str(r) for r in results)


async def test_unknown_transport_and_bad_batch_are_refused() -> None:
    with pytest.raises(ValueError):
        SolanaRpc(URL, transport="carrier-pigeon")
    with pytest.raises(ValueError):
        SolanaRpc(URL, batch_max=0)


async def test_real_server_error_object_and_unreachable_node() -> None:
    def handler(method: str, params: list[Any]) -> Any:
        raise JsonRpcFault(-32005, "Node is behind by 9 slots")

    async with JsonRpcServer(handler) as node:
        for transport in ("httpx", "aiohttp"):
            rpc = SolanaRpc(node.url, transport=transport)
            with pytest.raises(RpcError, match="behind"):
                await rpc.call("getSlot", [])
            await rpc.aclose()
        url = node.url
    for transport in ("httpx", "aiohttp"):
        rpc = SolanaRpc(url, transport=transport, timeout=5)
        with pytest.raises(TransportError):
            await rpc.call("getSlot", [])
        await rpc.aclose()


@pytest.fixture(params=["aiohttp", "unbatched"])
async def variant_harness(request: pytest.FixtureRequest) -> AsyncIterator[RpcSolanaHarness]:
    chain = LocalSolana()
    async with JsonRpcServer(solana_rpc_handler(chain)) as node:
        harness = RpcSolanaHarness.over(chain, node.url)
        options: dict[str, Any] = {"backend": "rpc", "network": "local", "rpc_url": node.url,
                                   "keypair": bytes(harness.payer_kp), "poll_interval": 0.01}
        if request.param == "aiohttp":
            options["rpc_transport"] = "aiohttp"
        else:
            options["rpc_batch_max"] = 1
        await harness._rail.aclose()
        harness._rail = make_rail(options)
        yield harness
        await harness._rail.aclose()


@pytest.mark.parametrize("name", ["happy_path", "tx_failed", "pending_then_final", "insufficient_funds"])
async def test_kit_over_other_transports(variant_harness: RpcSolanaHarness, name: str) -> None:
    await run_check(name, variant_harness)
    assert name in RAIL_CHECKS
