"""Paid flows against `envelopay devnet` with real chain timing (`bench/worker.py --devnet`).

Processes, as in README "Two terminals": the devnet (`envelopay devnet up`: Solana node
with a slot every 0.4 s, `confirmed` 2 slots after landing; the garden; the DKIM table),
the worker (`envelopay worker serve`, configured by `init --devnet`), and the buyer —
this process, its node built from its own `init --devnet` config.

Each flow: ORDER → INVOICE → pay on Solana → PAY sent the moment the node took the
transaction → FULFILL. The worker sees the PAY before the transaction is confirmed and
waits for it (engine/waiting.py). Per flow:

  latency       PAY sent → FULFILL received
  confirmation  PAY sent → the transaction's status is `confirmed` (polled every 10 ms
                by the bench itself on the node: the floor, the chain's own time)
  added         latency − confirmation: what the worker adds over the chain

Target (issue 13): added p99 ≤ 250 ms. Also paid flows/s with CONCURRENCY in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _workdir import run_dir

ENVELOPAY = [sys.executable, "-m", "envelopay.cli"]
WORKER = "worker@garden.local"
BUYER = "buyer@garden.local"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _confirmed_at(url: str, signature: str, client: Any) -> float:
    while True:
        doc = (await client.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "getSignatureStatuses",
                                            "params": [[signature]]})).json()
        status = doc["result"]["value"][0]
        if status is not None and status.get("confirmationStatus") in ("confirmed", "finalized"):
            return time.perf_counter()
        await asyncio.sleep(0.01)


async def _flows(work: Path, env: dict[str, str], flows: int, concurrency: int) -> dict[str, Any]:
    import httpx

    from envelopay.client.buyer import ClientApp
    from envelopay.config import load_config
    from envelopay.devnet.state import read_state
    from envelopay.engine import Notice
    from envelopay.node.agent_node import build_node
    from envelopay.protocol.messages import Fulfill, Invoice, Message, Order, Pay

    class Waiting(ClientApp):
        def __init__(self, wallets: dict[tuple[str, str], str]) -> None:
            super().__init__(wallets)
            self.futures: dict[tuple[str, str], asyncio.Future[Message]] = {}

        def future(self, flow_id: str, kind: str) -> asyncio.Future[Message]:
            if (flow_id, kind) not in self.futures:
                self.futures[(flow_id, kind)] = asyncio.get_running_loop().create_future()
            return self.futures[(flow_id, kind)]

        async def notify(self, notice: Notice) -> None:
            await super().notify(notice)
            kinds = ("invoice", "fulfill") if notice.message.type == "oops" else (notice.message.type,)
            for kind in kinds:
                fut = self.future(notice.flow_id, kind)
                if not fut.done():
                    fut.set_result(notice.message)

    state = read_state(Path(env["ENVELOPAY_DEVNET_HOME"]))
    cfg = load_config(work / "buyer" / "envelopay.toml")
    rails = dict(cfg.rails)
    rails["solana"] = {**rails["solana"], "confirm_timeout": 0}  # return once the node took it
    cfg = cfg.model_copy(update={"rails": rails})
    app = Waiting({(a.chain, a.token): a.wallet for a in cfg.accept})
    buyer = build_node(cfg, app=app)
    stop = asyncio.Event()
    pump = asyncio.create_task(buyer.serve(stop))
    rail = buyer.rails["solana-local"]
    latency: list[float] = []
    confirmation: list[float] = []
    failures: list[str] = []
    async with httpx.AsyncClient(timeout=10) as client:

        async def one(n: int) -> None:
            task = {"name": "word_count", "text": f"flow {n} words"}
            sent = await buyer.send(Order(id=f"ord_d{n}", task=task), WORKER)
            inv = await asyncio.wait_for(app.future(sent.flow_id, "invoice"), 120)
            assert isinstance(inv, Invoice), inv
            proof = await rail.pay(chain=inv.chain, token=inv.token, amount=inv.amount, recipient=inv.wallet)
            done = app.future(sent.flow_id, "fulfill")
            confirmed = asyncio.create_task(_confirmed_at(state.solana.rpc_url, proof["tx"], client))
            await buyer.send(Pay(id=f"pay_d{n}", amount=inv.amount, token=inv.token, chain=inv.chain,
                                 proof=proof, invoice_ref=inv.id), WORKER, flow_id=sent.flow_id)
            t0 = time.perf_counter()
            got = await asyncio.wait_for(done, 120)
            t1 = time.perf_counter()
            at = await asyncio.wait_for(confirmed, 120)
            if not isinstance(got, Fulfill):
                failures.append(f"flow {n}: {got.type}")
                return
            latency.append(t1 - t0)
            confirmation.append(at - t0)

        await one(-1)  # warm-up
        latency.clear()
        confirmation.clear()
        gate = asyncio.Semaphore(concurrency)

        async def gated(n: int) -> None:
            async with gate:
                await one(n)

        start = time.perf_counter()
        await asyncio.gather(*(gated(n) for n in range(flows)))
        elapsed = time.perf_counter() - start
    stop.set()
    await pump
    await buyer.close()
    buyer.store.close()
    added = [lat - conf for lat, conf in zip(latency, confirmation, strict=True)]
    return {"flows": len(latency), "failures": failures, "elapsed": elapsed, "latency": latency,
            "confirmation": confirmation, "added": added}


def run(flows: int = 40, concurrency: int = 8) -> None:
    with run_dir("ep-devnet-bench-") as work:
        env = {**os.environ, "ENVELOPAY_DEVNET_HOME": str(work / "devnet"),
               "ENVELOPAY_DEVNET_SOLANA_PORT": "0", "ENVELOPAY_DEVNET_BASE_PORT": "0"}
        os.environ.update({k: env[k] for k in ("ENVELOPAY_DEVNET_HOME",)})

        def cli(*args: str) -> str:
            done = subprocess.run([*ENVELOPAY, *args], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=300)
            if done.returncode != 0:
                raise SystemExit(f"{args}: {done.stdout}{done.stderr}")
            return done.stdout

        print(cli("devnet", "up", "--detach").strip())
        worker = None
        try:
            cli("init", "--devnet", "--address", WORKER, "--dir", "worker")
            cli("init", "--devnet", "--address", BUYER, "--dir", "buyer")
            with (work / "worker.log").open("w") as log:
                worker = subprocess.Popen([*ENVELOPAY, "worker", "serve", "-c", "worker/envelopay.toml"],
                                          cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
            r = asyncio.run(_flows(work, env, flows, concurrency))
        finally:
            if worker is not None:
                worker.terminate()
                worker.wait(30)
            with contextlib.suppress(SystemExit):
                cli("devnet", "down")
    if r["failures"]:
        raise SystemExit(f"flows failed: {r['failures']}")
    ms = 1000.0
    lat, conf, added = r["latency"], r["confirmation"], r["added"]
    print(f"devnet paid flows (Solana, slot 0.4 s, confirmed after 2 slots): {r['flows']} flows, "
          f"concurrency {concurrency}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  paid flows/s           {r['flows'] / r['elapsed']:.2f}")
    for name, values in (("PAY→FULFILL           ", lat), ("floor: confirmation   ", conf)):
        print(f"  {name} p50 {statistics.median(values) * ms:.0f} ms  p99 {_pct(values, 0.99) * ms:.0f} ms")
    p99 = _pct(added, 0.99) * ms
    print(f"  added (latency − conf) p50 {statistics.median(added) * ms:.0f} ms  p99 {p99:.0f} ms  "
          f"(target p99 ≤ 250 ms: {'met' if p99 <= 250 else 'NOT met'}); latency ÷ floor at p50 "
          f"{statistics.median(lat) / statistics.median(conf):.2f}")
