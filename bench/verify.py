"""Proof verification throughput, per rail: (a) on the local chain, (b) over JSON-RPC.

(a) Local chain: real payments made on LiteSVM / eth-tester, then `rail.verify` over
    them in a loop. Floor: the rail's pure check over the same documents, measured in
    this run; the ratio says how much of the budget the rail layer around it costs.
(b) RPC: a JSON-RPC server on loopback, in a separate process (a node is not the
    verifier's CPU), answers the fixture documents after an injected delay (50 ms);
    100 verifications in flight. Bound: concurrency / delay = 2,000/s. Printed: the
    throughput, its ratio to that bound, and the verifier's CPU time per verification.
    Target: >= 1,000 verifications/s through the RPC path.

Run: .venv/bin/python bench/verify.py [--seconds 5] [--rails solana,base]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_RPC = 1000.0


def _line(label: str, rate: float, cpu_us: float, extra: str) -> None:
    print(f"  {label:<34} {rate:>9,.0f}/s  cpu {cpu_us:>7.1f} us/verify  {extra}", flush=True)


async def _loop_for(
    seconds: float, concurrency: int, one: Callable[[int], Awaitable[bool]]
) -> tuple[int, float, float]:
    """Run `one(i)` from `concurrency` workers for `seconds`; return (count, wall, cpu)."""
    count = 0
    failures = 0
    stop_at = 0.0

    async def worker(offset: int) -> None:
        nonlocal count, failures
        i = offset
        while time.perf_counter() < stop_at:
            if not await one(i):
                failures += 1
            count += 1
            i += concurrency

    # Warm-up: connections opened, caches filled, before the clock starts.
    stop_at = time.perf_counter() + min(1.0, seconds / 4)
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    count = failures = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    stop_at = wall0 + seconds
    await asyncio.gather(*(worker(k) for k in range(concurrency)))
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if failures:
        raise SystemExit(f"{failures} verifications did not return ok: the bench measures the happy path")
    return count, wall, cpu


# -- servers (run in a child process) ---------------------------------------------------


def _solana_handler() -> Callable[[str, list[Any]], Any]:
    from envelopay.devnet.rpc_server import JsonRpcFault

    case = json.loads((ROOT / "fixtures/rpc/solana/success_usdc.json").read_text())
    results = {m: env["result"] for m, env in case["responses"].items()}

    def handle(method: str, params: list[Any]) -> Any:
        if method not in results:
            raise JsonRpcFault(-32601, "Method not found")
        return results[method]

    return handle


def _base_handler() -> Callable[[str, list[Any]], Any]:
    from envelopay.devnet.rpc_server import JsonRpcFault

    doc = json.loads((ROOT / "fixtures/rpc/base/success_usdc.json").read_text())

    def handle(method: str, params: list[Any]) -> Any:
        if method in doc["rpc"]:
            return doc["rpc"][method]
        raise JsonRpcFault(-32601, f"the method {method} does not exist/is not available")

    return handle


def serve(kind: str, delay: float) -> None:
    from envelopay.devnet.rpc_server import JsonRpcServer

    handler = _solana_handler() if kind == "solana" else _base_handler()

    async def main() -> None:
        async with JsonRpcServer(handler, delay=delay) as server:
            print(server.url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())


class _Server:
    """The fixture node in a child process (started and stopped by this script)."""

    def __init__(self, kind: str, delay: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, "--delay", str(delay)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise SystemExit(f"the {kind} fixture node did not start")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


async def _rpc_figure(kind: str, make: Callable[[str], Any], proof: dict[str, Any], exp: Any, seconds: float,
                      concurrency: int, delay: float, label: str) -> float:
    server = _Server(kind, delay)
    rail = make(server.url)
    try:
        async def remote(i: int) -> bool:
            return bool((await rail.verify(proof, exp)).ok)

        n, wall, cpu = await _loop_for(seconds, concurrency, remote)
    finally:
        closer = getattr(rail, "aclose", None)
        if closer is not None:
            await closer()
        server.close()
    rate, bound = n / wall, concurrency / delay
    verdict = "meets" if rate >= TARGET_RPC else "BELOW"
    _line(f"{label}, {concurrency} in flight, {delay * 1000:.0f} ms", rate, cpu / n * 1e6,
          f"ratio to bound {bound:,.0f}/s = {rate / bound:.2f} ({verdict} the {TARGET_RPC:,.0f}/s target)")
    return rate


# -- Solana -----------------------------------------------------------------------------


async def bench_solana(seconds: float, concurrency: int, delay: float) -> dict[str, float]:
    from solders.keypair import Keypair

    from envelopay.rails.interface import Expectation
    from envelopay_solana import LocalSolana, make_rail
    from envelopay_solana.verify import check_transaction

    print("solana", flush=True)
    chain = LocalSolana()
    payer = chain.new_wallet(sol=10**10, tokens={"USDC": 10**12})
    rail = make_rail({"local_chain": chain, "keypair": bytes(payer)})
    cases = []
    for _ in range(200):
        to = str(Keypair().pubkey())
        proof = await rail.pay(chain="solana-local", token="USDC", amount=1_000_000, recipient=to)
        cases.append((proof, Expectation("solana-local", "USDC", 1_000_000, to)))
    asset = rail.asset("solana-local", "USDC")
    assert asset is not None
    docs = [(chain.lookup(p["tx"])[0], e, p["tx"]) for p, e in cases]

    async def pure(i: int) -> bool:
        doc, exp, sig = docs[i % len(docs)]
        assert doc is not None
        return check_transaction(doc, exp, asset, signature=sig, confirmation="finalized").ok

    async def local(i: int) -> bool:
        proof, exp = cases[i % len(cases)]
        return (await rail.verify(proof, exp)).ok

    n, wall, cpu = await _loop_for(seconds / 2, 1, pure)
    floor, floor_cpu = n / wall, cpu / n * 1e6
    _line("pure check (floor)", floor, floor_cpu, "")
    n, wall, cpu = await _loop_for(seconds, 1, local)
    local_rate = n / wall
    local_cpu = cpu / n * 1e6
    _line("local chain (LiteSVM)", local_rate, local_cpu, f"CPU floor/local {floor_cpu / local_cpu:.2f}")

    case = json.loads((ROOT / "fixtures/rpc/solana/success_usdc.json").read_text())
    fixture_exp = Expectation(**case["expectation"])
    fixture_proof = {"tx": case["signature"]}
    rates: dict[str, float] = {}
    transports = ["httpx"]
    try:
        import aiohttp  # noqa: F401  (optional transport: bench it when installed)
    except ImportError:
        print("  (aiohttp not installed: the aiohttp transport is not measured)")
    else:
        transports.append("aiohttp")
    for transport in transports:
        def build(url: str, t: str = transport) -> Any:
            return make_rail({"backend": "rpc", "rpc_url": url, "rpc_transport": t})

        rates[transport] = await _rpc_figure("solana", build, fixture_proof, fixture_exp, seconds,
                                             concurrency, delay, f"rpc over {transport}")
    return {"floor": floor, "local": local_rate, **rates}


# -- Base -------------------------------------------------------------------------------


async def bench_base(seconds: float, concurrency: int, delay: float) -> dict[str, float]:
    from envelopay.rails.interface import Expectation
    from envelopay_base.fixtures import expectation_of
    from envelopay_base.local import LocalChain
    from envelopay_base.rail import make_rail

    print("base", flush=True)
    chain = LocalChain()
    address, key = chain.new_wallet()
    chain.fund(address, eth=10**20, usdc=10**13)
    rail = make_rail({"local_chain": chain, "keypair": key.encode()})
    cases = []
    for _ in range(20):  # py-evm executes every transaction in Python: keep the set small
        to = chain.new_wallet()[0]
        proof = await rail.pay(chain="base-local", token="USDC", amount=1_000_000, recipient=to)
        cases.append((proof, Expectation("base-local", "USDC", 1_000_000, to, confirmations=1)))

    async def local(i: int) -> bool:
        proof, exp = cases[i % len(cases)]
        return (await rail.verify(proof, exp)).ok

    n, wall, cpu = await _loop_for(seconds, 1, local)
    local_rate = n / wall
    _line("local chain (eth-tester)", local_rate, cpu / n * 1e6, "")

    doc = json.loads((ROOT / "fixtures/rpc/base/success_usdc.json").read_text())

    def build(url: str) -> Any:
        return make_rail({"backend": "rpc", "rpc_url": url, "network": doc.get("network", "mainnet")})

    rate = await _rpc_figure("base", build, doc["proof"], expectation_of(doc), seconds, concurrency, delay,
                             "rpc")
    return {"local": local_rate, "rpc": rate}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.05)
    parser.add_argument("--rails", default="solana,base")
    parser.add_argument("--serve", choices=["solana", "base"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.delay)
        return
    print(f"verify bench: {args.seconds:g} s per figure, concurrency {args.concurrency}, "
          f"RPC delay {args.delay * 1000:.0f} ms", flush=True)
    wanted = [r.strip() for r in args.rails.split(",") if r.strip()]
    if "solana" in wanted:
        asyncio.run(bench_solana(args.seconds, args.concurrency, args.delay))
    if "base" in wanted:
        asyncio.run(bench_base(args.seconds, args.concurrency, args.delay))


if __name__ == "__main__":
    main()
