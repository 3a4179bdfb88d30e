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

    .venv/bin/python bench/worker.py [--flows 500] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from envelopay.agent.demo import WORKER, DemoWorld
from envelopay.protocol.messages import Fulfill, Invoice, Order, Pay


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
    flows: int, concurrency: int, fsync: bool, sequential: int = 0
) -> tuple[float, list[float], list[float]]:
    with tempfile.TemporaryDirectory(prefix="bench-worker-") as tmp:
        world = DemoWorld(Path(tmp), None)
        world.garden_fsync = fsync
        world.buyer_usdc = 250_000 * (flows + sequential + 50)
        await world.setup()
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


async def transport_floor(flows: int, concurrency: int, fsync: bool) -> float:
    """Four signed messages per flow through the garden and its pickup, nothing else."""
    from envelopay import dkim
    from envelopay.agent.transport import GardenTransport
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.maildir import Pickup
    from envelopay.protocol.compose import compose_message
    from envelopay.protocol.messages import Which

    key = dkim.DkimKey.generate_ed25519()
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as tmp:
        async with GardenServer(Path(tmp), ["a@garden.local", "b@garden.local"], fsync=fsync) as garden:
            transports = [GardenTransport(garden.endpoint) for _ in range(concurrency)]
            total = flows * 4
            raw, _ = compose_message(Which(id="w1"), sender="a@garden.local", recipient="b@garden.local",
                                     domain="garden.local", now=datetime.now(UTC))
            got = 0
            async with Pickup([garden.maildir("b@garden.local")]) as pickup:
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
    args = ap.parse_args()
    t = time.perf_counter()
    floor = asyncio.run(transport_floor(args.flows, args.concurrency, not args.no_fsync))
    t_floor = time.perf_counter() - t
    t = time.perf_counter()
    fsync = not args.no_fsync
    rate, lat, alone = asyncio.run(paid_flows(args.flows, args.concurrency, fsync, args.sequential))
    print(f"(floor run {t_floor:.1f} s, worker run {time.perf_counter() - t:.1f} s)")
    p50, p99 = _pct(lat)
    import os

    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores (other work shares the machine)")
    print(f"paid flows (ORDER→INVOICE→PAY→FULFILL): {args.flows}, concurrency {args.concurrency}, "
          f"garden fsync {'off' if args.no_fsync else 'on'}")
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
