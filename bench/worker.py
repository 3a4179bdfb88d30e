"""Paid flows through the whole worker: ORDER→INVOICE→PAY→FULFILL.

Real components, one process: the walled garden (LMTP → Maildir, inotify pickup,
fsync on), DKIM signing and verification on every mail, a SQLite ledger per agent, and
the Solana rail on LiteSVM (the buyer pays USDC on-chain before each PAY).

Figures:
  flows/s          complete paid flows per second, CONCURRENCY flows in flight
  PAY→FULFILL      from the PAY accepted by the garden to the FULFILL taken in by the
                   buyer, p50 and p99
Floor (same run): the transport alone — four DKIM-signed messages per flow delivered
through the same garden and picked up, no engine, no ledger, no chain. The ratio
flows/s ÷ floor says how much of the garden's capacity the full worker keeps.
Targets (issue 6): >= 100 flows/s, PAY→FULFILL p99 <= 100 ms.

    .venv/bin/python bench/worker.py [--flows 500] [--concurrency 8] [--garden-process]

The garden runs in the agents' process by default (everything in one process);
`--garden-process` runs it as its own process (`envelopay garden serve`), the way an
MTA runs beside its agents, for the floor and the worker run alike.

A bench setting, printed with the figures: after set-up the heap is frozen
(`gc.freeze()`), as a long-running worker process would do, so that a full cyclic
collection does not rescan the libraries loaded at start (a 30–95 ms pause here);
`--no-gc-freeze` leaves it out. Durability settings are the defaults (garden fsync on,
SQLite WAL with synchronous=NORMAL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

from envelopay.agent.demo import BUYER, MALLORY, WORKER, DemoWorld
from envelopay.protocol.messages import Fulfill, Invoice, Order, Pay

GC_FREEZE = True  # --no-gc-freeze turns it off


@contextlib.asynccontextmanager
async def garden_process(root: Path, addresses: list[str], fsync: bool) -> AsyncIterator[int]:
    """`envelopay garden serve` in its own process (as an MTA runs); yields its port."""
    cmd = [sys.executable, "-m", "envelopay.cli", "garden", "serve", "--root", str(root), "--port", "0",
           "--fsync" if fsync else "--no-fsync"]
    for a in addresses:
        cmd += ["-a", a]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE)
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
    flows: int, concurrency: int, fsync: bool, sequential: int = 0, own_process: bool = False
) -> tuple[float, list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as tmp:
        world = DemoWorld(Path(tmp), None)
        world.garden_fsync = fsync
        world.buyer_usdc = 250_000 * (flows + sequential + 50)
        async with contextlib.AsyncExitStack() as stack:
            if own_process:
                world.garden_port = await stack.enter_async_context(
                    garden_process(Path(tmp) / "garden", [BUYER, WORKER, MALLORY], fsync))
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


async def transport_floor(flows: int, concurrency: int, fsync: bool, own_process: bool = False) -> float:
    """Four signed messages per flow through the garden and its pickup, nothing else."""
    from envelopay import dkim
    from envelopay.agent.transport import GardenTransport
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.maildir import Pickup, mailbox_path
    from envelopay.protocol.compose import compose_message
    from envelopay.protocol.messages import Which

    key = dkim.DkimKey.generate_ed25519()
    addresses = ["a@garden.local", "b@garden.local"]
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            endpoint: tuple[str, int] | Path
            if own_process:
                endpoint = ("127.0.0.1", await stack.enter_async_context(
                    garden_process(Path(tmp), addresses, fsync)))
            else:
                endpoint = (await stack.enter_async_context(
                    GardenServer(Path(tmp), addresses, fsync=fsync))).endpoint
            transports = [GardenTransport(endpoint) for _ in range(concurrency)]
            total = flows * 4
            raw, _ = compose_message(Which(id="w1"), sender="a@garden.local", recipient="b@garden.local",
                                     domain="garden.local", now=datetime.now(UTC))
            got = 0
            async with Pickup([mailbox_path(Path(tmp), "b@garden.local")]) as pickup:
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
            for t in transports:
                await t.close()
    return (got / 4) / elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--flows", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sequential", type=int, default=100, help="Flows run one at a time afterwards.")
    ap.add_argument("--no-fsync", action="store_true", help="Garden deliveries without fsync (both runs).")
    ap.add_argument("--garden-process", action="store_true",
                    help="Run the garden (LMTP → Maildir) as its own process, `envelopay garden serve`, "
                         "for both runs; default: in the agents' process.")
    ap.add_argument("--no-gc-freeze", action="store_true",
                    help="Leave the set-up heap to the cyclic collector (full collections rescan it).")
    args = ap.parse_args()
    global GC_FREEZE
    GC_FREEZE = not args.no_gc_freeze
    own = args.garden_process
    t = time.perf_counter()
    floor = asyncio.run(transport_floor(args.flows, args.concurrency, not args.no_fsync, own))
    t_floor = time.perf_counter() - t
    t = time.perf_counter()
    fsync = not args.no_fsync
    rate, lat, alone = asyncio.run(paid_flows(args.flows, args.concurrency, fsync, args.sequential, own))
    print(f"(floor run {t_floor:.1f} s, worker run {time.perf_counter() - t:.1f} s)")
    p50, p99 = _pct(lat)
    import os

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work shares the machine)")
    print(f"paid flows (ORDER→INVOICE→PAY→FULFILL): {args.flows}, concurrency {args.concurrency}, "
          f"garden fsync {'off' if args.no_fsync else 'on'}, garden "
          f"{'in its own process' if own else 'in the agents process'}, "
          f"gc.freeze() after set-up {'on' if GC_FREEZE else 'off'}")
    print(f"floor: garden transport alone        {floor:8.1f} flow-equivalents/s (4 signed mails each)")
    print(f"worker: complete paid flows          {rate:8.1f} flows/s   ratio to floor {rate / floor:.3f}"
          f"   target >= 100: {'met' if rate >= 100 else 'NOT met'}")
    print(f"PAY→FULFILL latency                  p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"
          f"   target p99 <= 100 ms: {'met' if p99 <= 100 else 'NOT met'}")
    if alone:
        a50, a99 = _pct(alone)
        print(f"PAY→FULFILL, one flow at a time      p50 {a50:6.1f} ms   p99 {a99:6.1f} ms"
              f"   ({len(alone)} flows)")


def _pct(values: list[float]) -> tuple[float, float]:
    ms = sorted(x * 1000 for x in values)
    return statistics.median(ms), ms[max(0, int(len(ms) * 0.99) - 1)]


if __name__ == "__main__":
    main()
