"""Paid flows through the whole worker: ORDER→INVOICE→PAY→FULFILL.

Real components: the walled garden (LMTP → Maildir, inotify pickup, fsync on), DKIM
signing and verification on every mail, a SQLite ledger per agent, and the Solana rail
on LiteSVM (the buyer pays USDC on-chain before each PAY; the worker verifies it).

Process layout (default, as deployed: a worker is not its customers' process):
  buyer  — this process: the load generator, the buyer's engine, ledger and DKIM key;
           it pays through the Solana rail's JSON-RPC backend;
  worker — its own process: the worker's engine, ledger, DKIM key and Solana rail
           (JSON-RPC backend: it verifies each proof on the node), and the garden
           (LMTP server + Maildirs), as an MTA on the worker's host;
  chain  — its own process: LiteSVM served as a Solana JSON-RPC node
           (envelopay_solana.devnode), the one chain both sides use.
At the end the worker process reports its ledger's flow states: the run fails unless
every flow (warm-up, timed, one at a time) is there as fulfilled.
`--garden-process` moves the garden to a fourth process (`envelopay garden serve`).
`--one-process` runs the older layout: everything in one process, chain in-process.

Figures:
  flows/s          complete paid flows per second, CONCURRENCY flows in flight
  PAY→FULFILL      from the buyer's send() of the PAY returning (committed to its outbox
                   and delivered, or handed to its drain already running) to the FULFILL
                   taken in by the buyer, p50 and p99
  CPU per flow     per process, over the timed flows (from /proc)
Floor (same run): the transport alone — four DKIM-signed messages per flow delivered
through the same garden and picked up, no engine, no ledger, no chain. The ratio
flows/s ÷ floor says how much of the garden's capacity the full worker keeps.
Targets (issue 6): >= 100 flows/s, PAY→FULFILL p99 <= 100 ms.

    .venv/bin/python bench/worker.py [--flows 500] [--concurrency 8] [--garden-process] [--one-process]

A bench setting, printed with the figures: after set-up the heap is frozen
(`gc.freeze()`) in every process, as a long-running worker process would do, so that a
full cyclic collection does not rescan the libraries loaded at start (a 30–95 ms pause
here); `--no-gc-freeze` leaves it out. Durability settings are the defaults (garden
fsync on, SQLite WAL with synchronous=NORMAL).

Runs in a series: the floor is all file creation, and on a file system without a journal
it slows for minutes after any run that removed thousands of files (bench/_workdir.py).
For runs back to back (two trees alternated, say), set BENCH_KEEP=DIR so that no run
removes its files, and remove DIR after the series; `make bench` does so.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _role import RoleProcess
from _workdir import run_dir

from envelopay.client.demo import BUYER, DOMAIN, MALLORY, PRICE, WORKER, BuyerApp, DemoWorld
from envelopay.engine import Notice
from envelopay.protocol.messages import Fulfill, Invoice, Message, Order, Pay

GC_FREEZE = True  # --no-gc-freeze turns it off
OBSERVED = False  # --observed: the worker process logs each message and keeps its metrics
PROFILE: Path | None = None  # --profile DIR: cProfile of the buyer's timed flows and the worker process


@contextlib.asynccontextmanager
async def garden_process(
    root: Path, addresses: list[str], fsync: bool, pids: dict[str, int] | None = None,
    accounts: Path | None = None,
) -> AsyncIterator[int]:
    """`envelopay garden serve` in its own process (as an MTA runs); yields its port.
    With `accounts` every sender authenticates (the default setup); without, --open."""
    cmd = [sys.executable, "-m", "envelopay.cli", "garden", "serve", "--root", str(root), "--port", "0",
           "--fsync" if fsync else "--no-fsync",
           *(["--accounts", str(accounts)] if accounts is not None else ["--open"])]
    for a in addresses:
        cmd += ["-a", a]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
    if pids is not None:
        pids["garden"] = proc.pid
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        if not line.startswith("garden listening on "):
            raise RuntimeError(f"garden process said {line!r}")
        yield int(line.rsplit(":", 1)[1].split()[0])
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.communicate(), 30)


async def one_flow(world: DemoWorld, n: int, latencies: list[float]) -> None:
    task = {"name": "word_count", "text": f"flow {n} words", "rail": "solana-local/USDC"}
    sent = await world.buyer.send(Order(id=f"ord_b{n}", task=task), WORKER)
    out = await world.worker.wait_outcome(sent.message_id, 60)
    await world.buyer.wait_outcome(out.outbox[0], 60)
    row = world.worker.store.outbox_get(out.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Invoice), out
    inv = row.outbound.message
    proof = await world.buyer_rails["solana-local"].pay(chain="solana-local", token="USDC", amount=inv.amount,
                                                        recipient=inv.wallet)
    pay = Pay(id=f"pay_b{n}", amount=inv.amount, token="USDC", chain="solana-local", proof=proof,
              invoice_ref=inv.id)
    sent = await world.buyer.send(pay, WORKER, flow_id=sent.flow_id)
    t0 = time.perf_counter()  # the PAY is in the worker's Maildir
    out = await world.worker.wait_outcome(sent.message_id, 60)
    await world.buyer.wait_outcome(out.outbox[0], 60)
    latencies.append(time.perf_counter() - t0)
    row = world.worker.store.outbox_get(out.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Fulfill), out


async def paid_flows(
    root: Path, flows: int, concurrency: int, fsync: bool, sequential: int = 0, own_process: bool = False
) -> tuple[float, list[float], list[float]]:
    tmp = root / "worker"
    tmp.mkdir()
    world = DemoWorld(Path(tmp), None)
    world.garden_fsync = fsync
    world.buyer_usdc = 250_000 * (flows + sequential + 50)
    async with contextlib.AsyncExitStack() as stack:
        if own_process:
            world.garden_port = await stack.enter_async_context(
                garden_process(Path(tmp) / "garden", [BUYER, WORKER, MALLORY], fsync,
                               accounts=world.garden_accounts()))
        return await _paid_flows(world, flows, concurrency, sequential)


async def _paid_flows(
    world: DemoWorld, flows: int, concurrency: int, sequential: int
) -> tuple[float, list[float], list[float]]:
    await world.setup()
    if GC_FREEZE:
        # The set-up heap (web3, py-evm, solders, pydantic schemas…) moves to the
        # permanent generation, so a full collection no longer rescans it: measured here,
        # a full collection paused the loop 30–95 ms before, 5–8 ms after.
        gc.collect()
        gc.freeze()
    try:
        latencies: list[float] = []
        sem = asyncio.Semaphore(concurrency)

        async def run(n: int) -> None:
            async with sem:
                await one_flow(world, n, latencies)

        await asyncio.gather(*(run(n) for n in range(min(20, flows))))  # warm-up
        latencies.clear()
        start = time.perf_counter()
        await asyncio.gather(*(run(n) for n in range(1000, 1000 + flows)))
        elapsed = time.perf_counter() - start
        # One flow at a time: the PAY→FULFILL hop without queueing behind other flows.
        alone: list[float] = []
        for n in range(5000, 5000 + sequential):
            await one_flow(world, n, alone)
        return flows / elapsed, latencies, alone
    finally:
        await world.teardown()
        if GC_FREEZE:
            gc.unfreeze()

# -- the split layout: buyer here, worker and chain in their own processes -------------


def _freeze() -> None:
    if GC_FREEZE:
        # The set-up heap (web3, py-evm, solders, pydantic schemas…) moves to the
        # permanent generation, so a full collection no longer rescans it: measured here,
        # a full collection paused the loop 30–95 ms before, 5–8 ms after.
        gc.collect()
        gc.freeze()


async def _until_terminated() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()


def _profiler(folder: str | None) -> Any:
    """A running cProfile.Profile when --profile is given (its figures are relative: the
    profiler slows every call), else None."""
    if folder is None:
        return None
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    return profile


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and its threads, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _role(role: str, setup: dict[str, Any], workdir: Path) -> RoleProcess:
    """This script in `role` (bench/_role.py), with gc.freeze() as the run has it."""
    args = () if GC_FREEZE else ("--no-gc-freeze",)
    return RoleProcess(Path(__file__).resolve(), role, setup, workdir, args)


def _agent_config(who: str, workdir: Path, port: int, records: dict[str, str],
                  extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "agent": {
            "address": f"{who}@{DOMAIN}", "domain": DOMAIN, "ledger": str(workdir / f"{who}.db"),
            "dkim_selector": who, "dkim_key": f"keys/{who}.pem", "dkim_policy": "required",
            "worker_id": who,
        },
        "transport": {"kind": "garden", "garden_root": "garden", "lmtp_port": port},
        "dkim_records": records,
        **extra,
    }


def _rpc_rail(url: str, keypair_hex: str) -> Any:
    from envelopay.rails.registry import make

    return make("solana", {"backend": "rpc", "network": "local", "rpc_url": url,
                           "keypair": bytes.fromhex(keypair_hex), "rpc_transport": "aiohttp",
                           "poll_interval": 0.01})


async def chain_role(setup: dict[str, Any]) -> None:
    """The chain process: LiteSVM served as a Solana JSON-RPC node."""
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_solana.devnode import solana_rpc_handler
    from envelopay_solana.local import LocalSolana

    chain = LocalSolana()
    for fund in setup["fund"]:
        chain.airdrop(fund["wallet"], fund["sol"])
        for symbol, amount in fund["tokens"].items():
            chain.mint_tokens(fund["wallet"], symbol, amount)
    async with JsonRpcServer(solana_rpc_handler(chain)) as node:
        _freeze()
        print("ready", node.url, flush=True)
        await _until_terminated()
        print(json.dumps({"requests": node.requests}), flush=True)


async def worker_role(setup: dict[str, Any]) -> None:
    """The worker process: engine + ledger + rail (verifying on the chain node over
    JSON-RPC) + the garden unless it runs in a process of its own."""
    from envelopay.config import config_from_dict
    from envelopay.mail.garden import GardenServer
    from envelopay.node.agent_node import build_node

    workdir = Path(setup["workdir"])
    port = setup["garden_port"]
    garden = None
    if port is None:
        # The role processes carry no garden credentials: an open garden, said so.
        garden = GardenServer(workdir / "garden", [BUYER, WORKER, MALLORY], fsync=setup["fsync"],
                              open_garden=True)
        await garden.start()
        endpoint = garden.endpoint
        assert isinstance(endpoint, tuple)
        port = endpoint[1]
    wallet = setup["worker_wallet"]
    cfg = config_from_dict(_agent_config("worker", workdir, port, setup["records"], {
        "accept": [{"chain": "solana-local", "token": "USDC", "wallet": wallet}],
        "tasks": [{"name": "word_count", "handler": "envelopay.worker.operations:word_count",
                   "schema": "envelopay.worker.operations:WordCount", "price": str(PRICE)}],
        "wallets": {"solana-local": wallet},
        # The load generator is one peer that draws thousands of answers an hour by design:
        # RFC 3834's per-peer rate limit (300 an hour by default) would hold them.
        "answers": {"per_peer": 0, "per_thread": 0},
    }), base_dir=workdir)
    node = build_node(cfg, rails={"solana-local": _rpc_rail(setup["rpc_url"], setup["worker_keypair"])})
    log = None
    if setup.get("observed"):  # as `worker serve --metrics` does: a line per message, the metrics
        from envelopay.node.metrics import WorkerMetrics
        from envelopay.node.serve_log import ServeLog
        from envelopay.rails.amounts import asset_decimals

        log = (workdir / "serve.log").open("w", buffering=1)  # line-buffered: a write per line
        node.watch(ServeLog(lambda line: print(line, file=log), "text", asset_decimals(node.rails)))
        node.watch(WorkerMetrics(node.store, WORKER))
    stop = asyncio.Event()
    serving = asyncio.create_task(node.serve(stop))
    _freeze()
    profile = _profiler(setup.get("profile"))
    print("ready", port, flush=True)
    await _until_terminated()
    if profile is not None:
        profile.disable()
        profile.dump_stats(Path(setup["profile"]) / "worker.prof")
    stop.set()
    await serving
    states: dict[str, int] = {}
    for flow in node.store.list_flows(WORKER, limit=1_000_000):
        states[flow.state] = states.get(flow.state, 0) + 1
    await node.close()
    node.store.close()
    if log is not None:
        log.close()
    if garden is not None:
        await garden.stop()
    print(json.dumps({"flow_states": states}), flush=True)


class _Waiting(BuyerApp):
    """The buyer's application: each INVOICE / FULFILL (or OOPS) it is told about
    resolves the future of its flow."""

    def __init__(self, wallets: dict[tuple[str, str], str]) -> None:
        super().__init__(wallets)
        self.futures: dict[tuple[str, str], asyncio.Future[Message]] = {}

    def future(self, flow_id: str, kind: str) -> asyncio.Future[Message]:
        fut = self.futures.get((flow_id, kind))
        if fut is None:
            fut = self.futures[(flow_id, kind)] = asyncio.get_running_loop().create_future()
        return fut

    async def notify(self, notice: Notice) -> None:
        kinds = ("invoice", "fulfill") if notice.message.type == "oops" else (notice.message.type,)
        for kind in kinds:
            fut = self.future(notice.flow_id, kind)
            if not fut.done():
                fut.set_result(notice.message)


async def split_flow(buyer: Any, app: _Waiting, rail: Any, n: int, latencies: list[float]) -> None:
    task = {"name": "word_count", "text": f"flow {n} words", "rail": "solana-local/USDC"}
    sent = await buyer.send(Order(id=f"ord_b{n}", task=task), WORKER)
    flow = sent.flow_id
    inv = await asyncio.wait_for(app.future(flow, "invoice"), 60)
    assert isinstance(inv, Invoice), inv
    proof = await rail.pay(chain="solana-local", token="USDC", amount=inv.amount, recipient=inv.wallet)
    pay = Pay(id=f"pay_b{n}", amount=inv.amount, token="USDC", chain="solana-local", proof=proof,
              invoice_ref=inv.id)
    fulfilled = app.future(flow, "fulfill")
    await buyer.send(pay, WORKER, flow_id=flow)
    t0 = time.perf_counter()  # the PAY is in the worker's Maildir
    got = await asyncio.wait_for(fulfilled, 60)
    latencies.append(time.perf_counter() - t0)
    assert isinstance(got, Fulfill) and got.result == {"words": 3, "characters": len(task["text"])}, got
    del app.futures[(flow, "invoice")], app.futures[(flow, "fulfill")]


async def split_paid_flows(
    root: Path, flows: int, concurrency: int, fsync: bool, sequential: int, garden_own: bool
) -> dict[str, Any]:
    from solders.keypair import Keypair

    from envelopay import dkim
    from envelopay.config import config_from_dict
    from envelopay.node.agent_node import build_node

    workdir = root / "worker"
    tmp = str(workdir)
    keys = workdir / "keys"
    keys.mkdir(parents=True)
    records: dict[str, str] = {}
    for who in ("buyer", "worker"):
        key = dkim.DkimKey.generate_ed25519()
        (keys / f"{who}.pem").write_bytes(key.private_pem())
        records[f"{who}._domainkey.{DOMAIN}"] = key.dns_txt_record()
    buyer_kp, worker_kp = Keypair(), Keypair()
    usdc = PRICE * (flows + sequential + 50)
    pids: dict[str, int] = {"buyer": os.getpid()}
    async with contextlib.AsyncExitStack() as stack:
        chain = await stack.enter_async_context(_role("chain", {"fund": [
            {"wallet": str(buyer_kp.pubkey()), "sol": 20 * 10**9, "tokens": {"USDC": usdc}},
            {"wallet": str(worker_kp.pubkey()), "sol": 2 * 10**9, "tokens": {}},
        ]}, workdir))
        pids["chain"] = chain.pid
        port = None
        if garden_own:
            port = await stack.enter_async_context(
                garden_process(workdir / "garden", [BUYER, WORKER, MALLORY], fsync, pids))
        worker = await stack.enter_async_context(_role("worker", {
            "workdir": tmp, "garden_port": port, "fsync": fsync, "records": records,
            "rpc_url": chain.ready, "worker_wallet": str(worker_kp.pubkey()),
            "worker_keypair": bytes(worker_kp).hex(), "observed": OBSERVED,
            "profile": str(PROFILE) if PROFILE else None}, workdir))
        pids["worker" + ("" if garden_own else "+garden")] = worker.pid
        rail = _rpc_rail(chain.ready, bytes(buyer_kp).hex())
        app = _Waiting({("solana-local", "USDC"): str(buyer_kp.pubkey())})
        buyer_cfg = config_from_dict(_agent_config("buyer", workdir, int(worker.ready), records, {}),
                                     base_dir=workdir)
        buyer = build_node(buyer_cfg, app=app, rails={"solana-local": rail})
        stop = asyncio.Event()
        serving = asyncio.create_task(buyer.serve(stop))
        _freeze()
        try:
            latencies: list[float] = []
            sem = asyncio.Semaphore(concurrency)

            async def run(n: int) -> None:
                async with sem:
                    await split_flow(buyer, app, rail, n, latencies)

            await asyncio.gather(*(run(n) for n in range(min(20, flows))))  # warm-up
            latencies.clear()
            cpu0 = {name: _cpu_seconds(pid) for name, pid in pids.items()}
            profile = _profiler(str(PROFILE) if PROFILE else None)
            start = time.perf_counter()
            await asyncio.gather(*(run(n) for n in range(1000, 1000 + flows)))
            elapsed = time.perf_counter() - start
            if profile is not None:
                profile.disable()
                profile.dump_stats(PROFILE / "buyer.prof")  # type: ignore[operator]
            cpu = {name: tuple((b - a) / flows * 1000 for a, b in zip(cpu0[name], _cpu_seconds(pid),
                                                                    strict=True))
                   for name, pid in pids.items()}
            alone: list[float] = []
            for n in range(5000, 5000 + sequential):
                await split_flow(buyer, app, rail, n, alone)
        finally:
            stop.set()
            await serving
            await buyer.close()
            buyer.store.close()
            if GC_FREEZE:
                gc.unfreeze()
    fulfilled = worker.final.get("flow_states", {}).get("fulfilled", 0)
    expected = min(20, flows) + flows + sequential
    if fulfilled != expected:
        raise RuntimeError(f"the worker's ledger holds {fulfilled} fulfilled flows, expected {expected}: "
                           f"{worker.final}")
    return {"rate": flows / elapsed, "latencies": latencies, "alone": alone, "cpu_ms": cpu,
            "worker_fulfilled": fulfilled, "chain_requests": chain.final.get("requests")}


async def transport_floor(
    root: Path, flows: int, concurrency: int, fsync: bool, own_process: bool = False
) -> tuple[float, float]:
    """Four signed messages per flow through the garden and its pickup, nothing else:
    (flow-equivalents/s, CPU ms per flow-equivalent over every process it ran in)."""
    from envelopay import dkim
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.maildir import Pickup, mailbox_path
    from envelopay.mail.transport.garden import GardenTransport
    from envelopay.protocol.compose import compose_message
    from envelopay.protocol.messages import Which

    key = dkim.DkimKey.generate_ed25519()
    addresses = ["a@garden.local", "b@garden.local"]
    tmp = root / "floor"
    async with contextlib.AsyncExitStack() as stack:
        endpoint: tuple[str, int] | Path
        pids: dict[str, int] = {}
        if own_process:
            endpoint = ("127.0.0.1", await stack.enter_async_context(
                garden_process(Path(tmp), addresses, fsync, pids)))
        else:
            endpoint = (await stack.enter_async_context(
                GardenServer(Path(tmp), addresses, fsync=fsync, open_garden=True))).endpoint
        transports = [GardenTransport(endpoint) for _ in range(concurrency)]
        total = flows * 4
        raw, _ = compose_message(Which(id="w1"), sender="a@garden.local", recipient="b@garden.local",
                                 domain="garden.local", now=datetime.now(UTC))
        got = 0
        async with Pickup([mailbox_path(Path(tmp), "b@garden.local")]) as pickup:
            cpu0 = _floor_cpu(pids)
            start = time.perf_counter()

            async def sender(t: GardenTransport, count: int) -> None:
                for _ in range(count):
                    await t.send(dkim.sign(raw, selector="s", domain="garden.local", key=key),
                                 "a@garden.local", "b@garden.local")

            per = total // concurrency
            senders = asyncio.gather(*(sender(t, per) for t in transports))
            while got < per * concurrency:
                d = await pickup.next(timeout=60)
                pickup.done(d)
                got += 1
            await senders
            elapsed = time.perf_counter() - start
            cpu = _floor_cpu(pids) - cpu0
        for t in transports:
            await t.close()
    return (got / 4) / elapsed, cpu * 1000 / (got / 4)


def _floor_cpu(pids: dict[str, int]) -> float:
    """CPU seconds of this process (all its threads) and of the garden's, if its own."""
    return time.process_time() + sum(sum(_cpu_seconds(pid)) for pid in pids.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flows", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sequential", type=int, default=100, help="Flows run one at a time afterwards.")
    ap.add_argument("--no-fsync", action="store_true", help="Garden deliveries without fsync (both runs).")
    ap.add_argument("--garden-process", action="store_true",
                    help="Run the garden (LMTP → Maildir) as its own process, `envelopay garden serve`, "
                         "for both runs; default: in the worker's process.")
    ap.add_argument("--one-process", action="store_true",
                    help="The older layout: buyer, worker, garden and chain (in-process LiteSVM) in one "
                         "process.")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="Leave the set-up heap to the cyclic collector (full collections rescan it).")
    ap.add_argument("--devnet", action="store_true",
                    help="Against `envelopay devnet` with real Solana timing (bench/devnet_worker.py): "
                         "flows/s and PAY→FULFILL minus the chain's confirmation time; --flows default 40.")
    ap.add_argument("--observed", action="store_true",
                    help="The worker logs a line per message (to a file) and counts its Prometheus "
                         "metrics, as `worker serve --metrics` does.")
    ap.add_argument("--profile", type=Path, metavar="DIR",
                    help="Write cProfile stats of the buyer's timed flows (buyer.prof) and of the worker "
                         "process (worker.prof) to DIR; read them with `python -m pstats`.")
    ap.add_argument("--role", choices=["chain", "worker"], help=argparse.SUPPRESS)
    ap.add_argument("--setup", help=argparse.SUPPRESS)
    args = ap.parse_args()
    global GC_FREEZE, OBSERVED, PROFILE
    GC_FREEZE = not args.no_gc_freeze
    OBSERVED = args.observed
    PROFILE = args.profile.resolve() if args.profile else None
    if PROFILE:
        PROFILE.mkdir(parents=True, exist_ok=True)
    if args.devnet:
        from devnet_worker import run as run_devnet  # beside this script (sys.path[0])

        flows = args.flows if "--flows" in sys.argv else 40
        run_devnet(flows, args.concurrency)
        return
    if args.role is not None:
        setup = json.loads(Path(args.setup).read_text())
        asyncio.run(chain_role(setup) if args.role == "chain" else worker_role(setup))
        return
    # One directory for the whole run, removed at the end (kept under BENCH_KEEP):
    # removing the floor's thousands of mail files before the worker runs would make the
    # worker pay for it, and files removed by a run in the last minutes slow both the
    # floor and the worker (bench/_workdir.py says why).
    with run_dir("bench-worker-") as tmp:
        _main(args, tmp)


def _main(args: argparse.Namespace, root: Path) -> None:
    own = args.garden_process
    fsync = not args.no_fsync
    t = time.perf_counter()
    floor, floor_cpu = asyncio.run(transport_floor(root, args.flows, args.concurrency, fsync, own))
    t_floor = time.perf_counter() - t
    t = time.perf_counter()
    cpu: dict[str, tuple[float, ...]] = {}
    if args.one_process:
        rate, lat, alone = asyncio.run(paid_flows(root, args.flows, args.concurrency, fsync, args.sequential,
                                                  own))
        layout = ("one process: buyer, worker, chain (LiteSVM in-process)"
                  + (" + the garden in its own process" if own else " and the garden"))
    else:
        got = asyncio.run(split_paid_flows(root, args.flows, args.concurrency, fsync, args.sequential, own))
        rate, lat, alone, cpu = got["rate"], got["latencies"], got["alone"], got["cpu_ms"]
        layout = ("buyer (load generator) | worker" + ("" if own else " + garden") + " | chain (LiteSVM "
                  "JSON-RPC node)" + (" | garden" if own else "") + f"; the worker's ledger: "
                  f"{got['worker_fulfilled']} flows fulfilled, as expected")
    print(f"(floor run {t_floor:.1f} s, worker run {time.perf_counter() - t:.1f} s)")
    p50, p99 = _pct(lat)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work shares the machine)")
    print(f"processes: {layout}")
    print(f"paid flows (ORDER→INVOICE→PAY→FULFILL): {args.flows}, concurrency {args.concurrency}, "
          f"garden fsync {'off' if args.no_fsync else 'on'}, "
          f"gc.freeze() after set-up {'on' if GC_FREEZE else 'off'}, "
          f"per-message log and metrics {'on' if OBSERVED else 'off'}")
    print(f"floor: garden transport alone        {floor:8.1f} flow-equivalents/s (4 signed mails each"
          f"{', garden in its own process' if own else ''}), CPU {floor_cpu:.1f} ms per flow-equivalent")
    print(f"worker: complete paid flows          {rate:8.1f} flows/s   ratio to floor {rate / floor:.3f}"
          f"   target >= 100: {'met' if rate >= 100 else 'NOT met'}")
    print(f"PAY→FULFILL latency                  p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"
          f"   target p99 <= 100 ms: {'met' if p99 <= 100 else 'NOT met'}")
    if alone:
        a50, a99 = _pct(alone)
        print(f"PAY→FULFILL, one flow at a time      p50 {a50:6.1f} ms   p99 {a99:6.1f} ms"
              f"   ({len(alone)} flows)")
    if cpu:
        print("CPU per timed flow, by process:      "
              + ", ".join(f"{k} {sum(v):.1f} ms ({v[1]:.1f} system)" for k, v in cpu.items())
              + f"; total {sum(sum(v) for v in cpu.values()):.1f} ms")
        # Flows/s can exceed neither the cores over the CPU one flow costs nor, so, this
        # ratio: what the CPU per flow alone allows, whatever the waiting.
        cores = os.cpu_count() or 1
        most = cores * 1000 / sum(sum(v) for v in cpu.values())
        print(f"at this CPU per flow, {cores} cores allow at most {most:.1f} flows/s: "
              f"a ratio to floor of at most {most / floor:.3f}")


def _pct(values: list[float]) -> tuple[float, float]:
    ms = sorted(x * 1000 for x in values)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


if __name__ == "__main__":
    main()
