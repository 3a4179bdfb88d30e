"""Paid work that takes time: jobs that sleep, and the mailbox answering beside them.

Real components, real processes (the layout of bench/worker.py): the buyer (this
process: the load generator, its engine, ledger and DKIM key, paying on the chain over
JSON-RPC), the worker (its own process: engine, SQLite ledger, Solana rail over JSON-RPC,
the garden, and the job runner, as `worker serve --garden` wires it), the chain (LiteSVM
as a Solana JSON-RPC node, its own process), and the prober (another agent, its own
process, engine and ledger, asking the worker WHICH).

The load: ORDERS paid ORDERs (ORDER → INVOICE → a USDC transfer on the chain → PAY),
whose handler sleeps NAP seconds (async), job concurrency CONCURRENCY; a WHICH sent every
100 ms throughout, before the load (idle) and during it. The ORDERs come (`--arrivals`):
  paced    one every 1/rate s, rate = 1.1 x concurrency / NAP (the jobs never starve and
           the queue grows slowly): the default, buyers who do not coordinate
  poisson  the same rate on average, exponential gaps (a fixed seed): clusters happen
  burst    all at once, 4 x concurrency in flight: the jobs then start, and end, in
           cohorts of 16 in one tick, an artefact of the closed loop
The prober sends WARM_UP WHICHs before it measures (its first connection, first pages).
`--prober buyer`: the load generator sends the WHICHs itself (before 2026-12-05: its own
event loop, busy with 64 flows, was then part of every round trip).

Figures (targets from issue 31):
  WHICH round trip   p50/p99 during the load against idle, same run     (target <= 1.5x)
  jobs/s             from the first job started to the last done, against
                     concurrency / NAP                                    (target >= 0.9)
  accepted→started   the job's queued time (the PAY's commit) to its running time, both
                     on the worker's clock, p99; the runner is woken by each committed
                     job (event-driven start), its poll interval is printed beside it

    .venv/bin/python bench/jobs.py [--orders 200] [--concurrency 16] [--nap 2] [--quick]
                                   [--arrivals paced|poisson|burst] [--prober own|buyer]
                                   [--garden-process] [--connections 4]

`--connections`: the LMTP connections each side's garden transport keeps (4: what
`worker serve` opens); each delivery holds one through the garden's fsync.
`--garden-process`: the garden in a process of its own, as the devnet runs it.

`--quick` (64 orders, ~40 s with set-up) is the short form of the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

from _role import RoleProcess
from _workdir import run_dir
from pydantic import BaseModel, ConfigDict
from worker import (
    _agent_config,
    _rpc_rail,
    _until_terminated,
    _Waiting,
    chain_role,
    garden_process,
)

from envelopay.client.demo import BUYER, DOMAIN, PRICE, WORKER
from envelopay.protocol.messages import Fulfill, Invoice, Methods, Order, Pay, Which

POLL = 0.5  # the runner's poll interval (a backstop: each committed job wakes it)
PROBER = f"prober@{DOMAIN}"
HEADROOM = 1.1  # paced and poisson arrivals: ORDERs per second, against what the jobs take
WARM_UP = 5  # WHICHs each prober sends before it measures (first connections, first pages)
IDLE_SECONDS = 10.0  # ~100 idle WHICHs: a p99 of 30 was their 2nd-largest, of 100 it is one


class Nap(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float
    n: int = 0


async def nap(p: Nap) -> dict[str, Any]:
    await asyncio.sleep(p.seconds)
    return {"slept": p.seconds, "n": p.n}


async def worker_role(setup: dict[str, Any]) -> None:
    """The worker: the node as `worker serve` builds it, the garden, the job runner."""
    from envelopay.config import config_from_dict
    from envelopay.mail.garden import GardenServer
    from envelopay.node.agent_node import build_node
    from envelopay.node.from_config import garden_transport
    from envelopay.node.jobs import job_runner

    workdir = Path(setup["workdir"])
    garden = None
    port = setup["garden_port"]
    if port is None:
        garden = GardenServer(workdir / "garden", [BUYER, WORKER, PROBER], fsync=True, open_garden=True)
        await garden.start()
        endpoint = garden.endpoint
        assert isinstance(endpoint, tuple)
        port = endpoint[1]
    wallet = setup["worker_wallet"]
    cfg = config_from_dict(_agent_config("worker", workdir, port, setup["records"], {
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": wallet}],
        "tasks": [{"name": "nap", "handler": "__main__:nap", "schema": "__main__:Nap", "price": str(PRICE),
                   "concurrency": setup["concurrency"], "time_limit": 600}],
        "answers": {"per_peer": 0, "per_thread": 0},  # one peer draws thousands of answers by design
    }), base_dir=workdir)
    node = build_node(cfg, rails={"solana-local": _rpc_rail(setup["rpc_url"], setup["worker_keypair"])},
                      transport=garden_transport(cfg, setup["connections"]))
    runner = job_runner(node, cfg, poll=POLL)
    assert runner is not None
    await node.warm()  # as serve() does first: ready means ready
    stop = asyncio.Event()
    loops = [asyncio.create_task(node.serve(stop)), asyncio.create_task(runner.run(stop))]
    print("ready", port, flush=True)
    await _until_terminated()
    stop.set()
    await asyncio.gather(*loops)
    jobs = node.store.job_list(WORKER, limit=1_000_000)
    print(json.dumps({
        "states": {s: sum(1 for j in jobs if j.state == s) for s in {j.state for j in jobs}},
        "times": [[j.at[s].timestamp() for s in ("queued", "running", "done")] for j in jobs
                  if "done" in j.at],
        "first_start": min(j.at["running"] for j in jobs if "running" in j.at).timestamp(),
        "last_done": max(j.at["done"] for j in jobs if "done" in j.at).timestamp(),
        "done": sum(1 for j in jobs if j.state == "done"),
    }), flush=True)
    await node.close()
    node.store.close()
    if garden is not None:
        await garden.stop()


async def prober_role(setup: dict[str, Any]) -> None:
    """Another agent asking the worker WHICH every 100 ms: idle until it prints ready,
    then loaded until it is stopped; its last line holds both series."""
    from envelopay.config import config_from_dict
    from envelopay.node.agent_node import build_node
    from envelopay.node.from_config import garden_transport

    workdir = Path(setup["workdir"])
    app = _Waiting({})
    cfg = config_from_dict(_agent_config("prober", workdir, setup["garden_port"], setup["records"], {}),
                           base_dir=workdir)
    node = build_node(cfg, app=app, transport=garden_transport(cfg, 1))
    stop = asyncio.Event()
    serving = asyncio.create_task(node.serve(stop))
    idle = await idle_whiches(node, app)
    done = asyncio.Event()
    loaded: list[float] = []
    sends: list[float] = []
    probe = asyncio.create_task(whiches(node, app, done, loaded, sends))
    print("ready", len(idle), flush=True)
    await _until_terminated()
    done.set()
    await probe
    stop.set()
    await serving
    await node.close()
    node.store.close()
    print(json.dumps({"idle": idle, "loaded": loaded, "sends": sends}), flush=True)


async def paid_job(buyer: Any, app: _Waiting, rail: Any, n: int, nap_s: float) -> None:
    sent = await buyer.send(Order(id=f"ord_{n}", task={"name": "nap", "seconds": nap_s, "n": n}), WORKER)
    inv = await asyncio.wait_for(app.future(sent.flow_id, "invoice"), 120)
    assert isinstance(inv, Invoice), inv
    proof = await rail.pay(chain="solana-local", token="USDC", amount=inv.amount, recipient=inv.wallet)
    fulfilled = app.future(sent.flow_id, "fulfill")
    await buyer.send(Pay(id=f"pay_{n}", amount=inv.amount, token="USDC", chain="solana-local", proof=proof,
                         invoice_ref=inv.id), WORKER, flow_id=sent.flow_id)
    got = await asyncio.wait_for(fulfilled, 600)
    assert isinstance(got, Fulfill) and got.result == {"slept": nap_s, "n": n}, got


async def whiches(buyer: Any, app: _Waiting, until: asyncio.Event, out: list[float],
                  sends: list[float] | None = None) -> None:
    """A WHICH every 100 ms until `until`; each round trip (send → METHODS taken in), and
    into `sends` the part of it the buyer's `send` took (its row delivered)."""
    n = 0
    while not until.is_set():
        n += 1
        t0 = time.perf_counter()
        sent = await buyer.send(Which(id=f"w{n}_{int(t0 * 1000)}"), WORKER)
        if sends is not None:
            sends.append(time.perf_counter() - t0)
        got = await asyncio.wait_for(app.future(sent.flow_id, "methods"), 60)
        assert isinstance(got, Methods), got
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(max(0.0, 0.1 - (time.perf_counter() - t0)))


async def idle_whiches(sender: Any, app: _Waiting) -> list[float]:
    """WARM_UP WHICHs not counted, then the idle series: a WHICH every 100 ms for IDLE_SECONDS."""
    for n in range(WARM_UP):
        sent = await sender.send(Which(id=f"warm{n}"), WORKER)
        await asyncio.wait_for(app.future(sent.flow_id, "methods"), 60)
    idle: list[float] = []
    enough = asyncio.Event()
    asyncio.get_running_loop().call_later(IDLE_SECONDS, enough.set)
    await whiches(sender, app, enough, idle)
    return idle


async def loop_lag(until: asyncio.Event, out: list[float]) -> None:
    """How late a 10 ms sleep wakes in the buyer's event loop: time no task could run
    (CPU work on the loop, or no CPU for the process)."""
    while not until.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.01)
        out.append(time.perf_counter() - t0 - 0.01)


def arrival_times(arrivals: str, orders: int, rate: float) -> list[float]:
    """When each ORDER starts, in seconds from the load's start: "burst" all at once (at
    most 4 x concurrency in flight), "paced" one every 1/rate s, "poisson" independent
    buyers at `rate` on average (exponential gaps, a fixed seed: the same run each time)."""
    if arrivals == "burst":
        return [0.0] * orders
    rng = random.Random(7)
    gaps = [rng.expovariate(rate) if arrivals == "poisson" else 1 / rate for _ in range(orders)]
    return [sum(gaps[:n]) for n in range(orders)]


async def run(root: Path, orders: int, concurrency: int, nap_s: float, connections: int,
              arrivals: str, own_prober: bool, own_garden: bool) -> dict[str, Any]:
    from solders.keypair import Keypair

    from envelopay import dkim
    from envelopay.config import config_from_dict
    from envelopay.node.agent_node import build_node
    from envelopay.node.from_config import garden_transport

    (root / "keys").mkdir(parents=True)
    records: dict[str, str] = {}
    for who in ("buyer", "worker", "prober"):
        key = dkim.DkimKey.generate_ed25519()
        (root / "keys" / f"{who}.pem").write_bytes(key.private_pem())
        records[f"{who}._domainkey.{DOMAIN}"] = key.dns_txt_record()
    buyer_kp, worker_kp = Keypair(), Keypair()
    async with contextlib.AsyncExitStack() as stack:
        chain = await stack.enter_async_context(RoleProcess(Path(__file__).resolve(), "chain", {"fund": [
            {"wallet": str(buyer_kp.pubkey()), "sol": 20 * 10**9, "tokens": {"USDC": PRICE * (orders + 10)}},
            {"wallet": str(worker_kp.pubkey()), "sol": 2 * 10**9, "tokens": {}},
        ]}, root))
        garden_port = None
        if own_garden:
            garden_port = await stack.enter_async_context(
                garden_process(root / "garden", [BUYER, WORKER, PROBER], True))
        worker = await stack.enter_async_context(RoleProcess(Path(__file__).resolve(), "worker", {
            "workdir": str(root), "records": records, "rpc_url": chain.ready, "concurrency": concurrency,
            "connections": connections, "garden_port": garden_port,
            "worker_wallet": str(worker_kp.pubkey()), "worker_keypair": bytes(worker_kp).hex()}, root))
        rail = _rpc_rail(chain.ready, bytes(buyer_kp).hex())
        app = _Waiting({("solana-local", "USDC"): str(buyer_kp.pubkey())})
        cfg = config_from_dict(_agent_config("buyer", root, int(worker.ready), records, {}), base_dir=root)
        buyer = build_node(cfg, app=app, rails={"solana-local": rail},
                           transport=garden_transport(cfg, connections))
        stop = asyncio.Event()
        serving = asyncio.create_task(buyer.serve(stop))
        prober = None
        try:
            idle: list[float] = []
            loaded: list[float] = []
            sends: list[float] = []
            lag: list[float] = []
            done = asyncio.Event()
            if own_prober:
                prober = RoleProcess(Path(__file__).resolve(), "prober", {
                    "workdir": str(root), "records": records, "garden_port": int(worker.ready)}, root)
                await prober.__aenter__()
                probe = asyncio.create_task(done.wait())
                lagging = asyncio.create_task(loop_lag(done, lag))
            else:
                idle = await idle_whiches(buyer, app)
                probe = asyncio.create_task(whiches(buyer, app, done, loaded, sends))
                lagging = asyncio.create_task(loop_lag(done, lag))
            gate = asyncio.Semaphore(4 * concurrency)  # flows in flight: enough to keep the jobs fed

            starts = arrival_times(arrivals, orders, HEADROOM * concurrency / nap_s)

            async def one(n: int) -> None:
                await asyncio.sleep(starts[n])
                async with gate:
                    await paid_job(buyer, app, rail, n, nap_s)

            t0 = time.perf_counter()
            await asyncio.gather(*(one(n) for n in range(orders)))
            elapsed = time.perf_counter() - t0
            done.set()
            await probe
            await lagging
            if prober is not None:
                await prober.__aexit__(None, None, None)
                idle, loaded, sends = prober.final["idle"], prober.final["loaded"], prober.final["sends"]
        finally:
            stop.set()
            await serving
            await buyer.close()
            buyer.store.close()
    return {"idle": idle, "loaded": loaded, "sends": sends, "lag": lag, "elapsed": elapsed,
            "worker": worker.final}


def _start_delays(times: list[list[float]]) -> tuple[list[float], list[float]]:
    """Per job, ms from queued to running; and from queued, or the last slot freed before
    it started when that came later (the runner cannot start a job with every slot busy)."""
    dones = sorted(t[2] for t in times)
    waited, start = [], []
    for queued, running, _ in times:
        freed = max((d for d in dones if d <= running), default=queued)
        waited.append((running - queued) * 1000)
        start.append((running - max(queued, freed)) * 1000)
    return waited, start


def _pct(values: list[float]) -> tuple[float, float]:
    ms = sorted(values)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


def report(args: argparse.Namespace, got: dict[str, Any]) -> None:
    w = got["worker"]
    i50, i99 = _pct([x * 1000 for x in got["idle"]])
    l50, l99 = _pct([x * 1000 for x in got["loaded"]])
    rate = w["done"] / (w["last_done"] - w["first_start"])
    ideal = args.concurrency / args.nap
    waited, start = _start_delays(w["times"])
    q50, q99 = _pct(waited)
    s50, s99 = _pct(start)
    ratio99 = l99 / i99
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work shares the machine)")
    garden = " | garden" if args.garden_process else " + garden"
    prober = " | prober (WHICH)" if args.prober == "own" else " (and WHICH)"
    print(f"processes: buyer (load generator){prober} | worker{garden} + job runner"
          " | chain (LiteSVM JSON-RPC node)")
    print(f"ORDERs arrive: {args.arrivals}" + ("" if args.arrivals == "burst" else
          f" at {HEADROOM * args.concurrency / args.nap:.1f}/s ({HEADROOM:g} x concurrency/nap)"))
    print(f"paid ORDERs: {args.orders}, handler sleeps {args.nap:g} s, job concurrency {args.concurrency}; "
          f"the worker's jobs: {w['states']}; wall time of the load {got['elapsed']:.1f} s; "
          f"garden connections per side {args.connections}")
    print(f"WHICH round trip, idle    ({len(got['idle']):4d})  p50 {i50:7.1f} ms   p99 {i99:7.1f} ms")
    print(f"WHICH round trip, loaded  ({len(got['loaded']):4d})  p50 {l50:7.1f} ms   p99 {l99:7.1f} ms"
          f"   ratio p50 {l50 / i50:.2f}x  p99 {ratio99:.2f}x   target <= 1.5x: "
          f"{'met' if max(ratio99, l50 / i50) <= 1.5 else 'NOT met'}")
    d50, d99 = _pct([x * 1000 for x in got["sends"]])
    g50, g99 = _pct([x * 1000 for x in got["lag"]])
    who = "prober" if args.prober == "own" else "buyer"
    print(f"  of which the {who}'s send (its row delivered)  p50 {d50:7.1f} ms   p99 {d99:7.1f} ms;"
          f"  the buyer's event loop late  p50 {g50:6.1f} ms  p99 {g99:7.1f} ms")
    print(f"jobs/s {rate:6.2f} against concurrency/nap {ideal:.2f}   ratio {rate / ideal:.3f}"
          f"   target >= 0.9: {'met' if rate / ideal >= 0.9 else 'NOT met'}")
    print(f"PAY accepted → job started, with its wait for a free slot  p50 {q50:7.1f} ms  p99 {q99:7.1f} ms")
    print(f"PAY accepted (or a slot freed, if later) → job started      p50 {s50:7.1f} ms  p99 {s99:7.1f} ms"
          f"   (event-driven start; poll {POLL * 1000:.0f} ms only a backstop): target p99 <= poll + 50 ms: "
          f"{'met' if s99 <= POLL * 1000 + 50 else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--orders", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--nap", type=float, default=2.0)
    ap.add_argument("--connections", type=int, default=4, help="LMTP connections per side (4: serve's).")
    ap.add_argument("--quick", action="store_true", help="64 orders: under a minute with set-up.")
    ap.add_argument("--arrivals", choices=["paced", "poisson", "burst"], default="paced",
                    help="How the ORDERs come (see arrival_times).")
    ap.add_argument("--prober", choices=["own", "buyer"], default="own",
                    help="Who sends the WHICHs: an agent of its own, or the load generator.")
    ap.add_argument("--garden-process", action="store_true", help="The garden in a process of its own.")
    ap.add_argument("--role", choices=["chain", "worker", "prober"], help=argparse.SUPPRESS)
    ap.add_argument("--setup", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role is not None:
        setup = json.loads(Path(args.setup).read_text())
        roles = {"chain": chain_role, "worker": worker_role, "prober": prober_role}
        asyncio.run(roles[args.role](setup))
        return
    if args.quick:
        args.orders = 64
    with run_dir("bench-jobs-") as tmp:
        got = asyncio.run(run(tmp, args.orders, args.concurrency, args.nap, args.connections,
                              args.arrivals, args.prober == "own", args.garden_process))
    report(args, got)


if __name__ == "__main__":
    main()
