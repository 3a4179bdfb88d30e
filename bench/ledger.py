"""Ledger benchmark: engine flow steps per second on SQLite and PostgreSQL, 1 and 4 processes.

A step is one inbound prepaid ORDER through `Engine.handle_parsed`: claim the
Message-ID, reserve (sender, id) and the proof key, verify (an in-memory bench rail),
step the flow, ask the application, and commit state + log + the FULFILL outbox row.
Parsing is excluded (bench/parse.py measures it). The floor, measured in the same run
on the same database with the same number of processes, is a bare single-row INSERT
and COMMIT per step. Beside the wall-clock figures it prints the engine processes' CPU
time per step (the database server's CPU not included): the capacity when the 2-core
machine is shared with other jobs. Targets (issue 4): SQLite >= 2,000 steps/s in one
process; PostgreSQL >= 1,500 steps/s with 4 processes.

    python bench/ledger.py [--n 1500] [--rounds 2] [--pg postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import secrets
import sqlite3
import sys
import time
from datetime import UTC, datetime
from typing import Any

from _workdir import run_dir

PG_DEFAULT = os.environ.get("ENVELOPAY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
WORKER = "worker@bench.test"
WALLET = "W-bench"


class BenchRail:
    """Accepts any proof {"tx": ...} paying the bench wallet; no chain involved."""

    name = "bench"
    chains = ("benchchain",)

    def assets(self) -> tuple[Any, ...]:
        return ()

    def proof_key(self, proof: dict[str, Any]) -> str:
        return str(proof["tx"]).lower()

    async def verify(self, proof: dict[str, Any], expectation: Any) -> Any:
        from envelopay.rails.interface import Verdict

        return Verdict.accepted(
            observed_amount=expectation.amount, payer=None, tx_time=None, proof_key=self.proof_key(proof)
        )

    async def pay(self, **kw: Any) -> dict[str, Any]:
        raise NotImplementedError

    # A binding rail (envelopay.rails.binding) whose signatures are free: an unbound prepaid
    # proof is refused payer_mismatch, and the bench measures the store, not signing.
    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        return None

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        return True


def _app() -> Any:
    from envelopay.engine import BaseApplication, Context, Refuse
    from envelopay.protocol.codes import OopsCode
    from envelopay.protocol.messages import Fulfill, Invoice, Order

    class App(BaseApplication):
        def wallet(self, chain: str, token: str) -> str | None:
            return WALLET

        async def order(
            self, order: Order, ctx: Context, *, paid: int | None
        ) -> Invoice | Fulfill | Refuse | OopsCode | None:
            return Fulfill(id=ctx.new_id("ful"), order_ref=order.id, result={"ok": True})

    return App()


def _messages(tag: str, n: int) -> list[Any]:
    from envelopay.protocol.compose import compose
    from envelopay.protocol.messages import Order
    from envelopay.protocol.outbound import Outbound
    from envelopay.protocol.parse import parse

    now = datetime.now(UTC)
    out = []
    for i in range(n):
        order = Order(
            v="0.2.0",
            id=f"ord_{tag}_{i}",
            task={"op": "x"},
            amount=100,
            token="TOK",
            chain="benchchain",
            proof={"tx": f"tx-{tag}-{i}", "payer": "bench-payer", "payer_sig": "bench-sig"},
        )
        ob = Outbound(
            sender=f"buyer{i % 50}@client.test",
            recipient=WORKER,
            message=order,
            message_id=f"<{tag}.{i}@client.test>",
            date=now,
        )
        out.append(parse(compose(ob)))
    return out


def _store(backend: str, where: str) -> Any:
    if backend == "sqlite":
        from envelopay.ledger.sqlite import SqliteStore

        return SqliteStore(where)
    from envelopay.ledger.postgres import PostgresStore

    return PostgresStore(where, max_size=1)


def _steps_worker(backend: str, where: str, tag: str, n: int, start: Any, q: Any) -> None:
    from envelopay.engine import Engine

    store = _store(backend, where)
    parsed = _messages(tag, n)
    engine = Engine(
        store,
        address=WORKER,
        domain="bench.test",
        rails={"benchchain": BenchRail()},  # type: ignore[dict-item]
        app=_app(),
        worker_id=f"bench-{tag}",
    )

    async def run() -> int:
        ok = 0
        for p in parsed:
            outcome = await engine.handle_parsed(p)
            ok += outcome.status == "processed" and len(outcome.outbox) == 1
        return ok

    start.wait()
    t0, c0 = time.perf_counter(), time.process_time()
    ok = asyncio.run(run())
    q.put((time.perf_counter() - t0, ok, time.process_time() - c0))
    store.close()


def _floor_worker(backend: str, where: str, tag: str, n: int, start: Any, q: Any) -> None:
    if backend == "sqlite":
        conn = sqlite3.connect(where, isolation_level=None, timeout=60)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA busy_timeout = 60000")
        start.wait()
        t0 = time.perf_counter()
        for i in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO bench_floor (k) VALUES (?)", (f"{tag}-{i}",))
            conn.execute("COMMIT")
        q.put((time.perf_counter() - t0, n, 0.0))
        conn.close()
        return
    import psycopg

    with psycopg.connect(where, autocommit=True) as pg:
        start.wait()
        t0 = time.perf_counter()
        for i in range(n):
            pg.execute("INSERT INTO bench_floor (k) VALUES (%s)", (f"{tag}-{i}",))
        q.put((time.perf_counter() - t0, n, 0.0))


def _parallel(fn: Any, backend: str, where: str, procs: int, n: int) -> tuple[float, int, float]:
    ctx = mp.get_context("spawn")
    start, q = ctx.Barrier(procs + 1), ctx.Queue()
    run = secrets.token_hex(3)
    workers = [
        ctx.Process(target=fn, args=(backend, where, f"{run}{w}", n // procs, start, q)) for w in range(procs)
    ]
    for w in workers:
        w.start()
    start.wait(timeout=300)  # every process has imported, connected and prepared its messages
    t0 = time.perf_counter()
    results = [q.get(timeout=600) for _ in workers]
    wall = time.perf_counter() - t0
    for w in workers:
        w.join()
    # Wall time from the common start to the last finisher.
    return max(wall, max(r[0] for r in results)), sum(r[1] for r in results), sum(r[2] for r in results)


def _setup(backend: str, where: str) -> None:
    if backend == "sqlite":
        _store(backend, where).close()
        with sqlite3.connect(where) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, k TEXT NOT NULL)")
        return
    import psycopg

    _store(backend, where).close()
    with psycopg.connect(where, autocommit=True) as pg:
        pg.execute("CREATE TABLE IF NOT EXISTS bench_floor (id BIGSERIAL PRIMARY KEY, k TEXT NOT NULL)")


def _pg_schema(base: str) -> tuple[str, str]:
    import psycopg

    schema = f"bench_{secrets.token_hex(4)}"
    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'CREATE SCHEMA "{schema}"')
    sep = "&" if "?" in base else "?"
    return schema, f"{base}{sep}options=-csearch_path%3D{schema}"


def _drop_schema(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base, autocommit=True) as pg:
        pg.execute(f'DROP SCHEMA "{schema}" CASCADE')


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1500, help="steps per figure")
    ap.add_argument("--pg", default=PG_DEFAULT)
    ap.add_argument(
        "--rounds", type=int, default=2, help="best of N rounds per figure (the machine is shared)"
    )
    args = ap.parse_args()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"bench/ledger.py  {datetime.now(UTC):%Y-%m-%d %H:%M} UTC  cpus={os.cpu_count()}  "
        f"python {sys.version.split()[0]}  steps per figure={args.n}, best of {args.rounds}  load avg {load}"
    )
    targets = {("sqlite", 1): 2000.0, ("postgres", 4): 1500.0}
    failed = False
    with run_dir("bench-ledger-") as tmp:
        for backend in ("sqlite", "postgres"):
            for procs in (1, 4):
                if backend == "sqlite":
                    where, schema = str(tmp / f"bench{procs}.db"), None
                else:
                    schema, where = _pg_schema(args.pg)
                floor = steps = 0.0
                s_ok, cpu_us = 0, float("inf")
                try:
                    _setup(backend, where)
                    for _ in range(args.rounds):
                        f_wall, f_n, _ = _parallel(_floor_worker, backend, where, procs, args.n)
                        s_wall, s_ok, s_cpu = _parallel(_steps_worker, backend, where, procs, args.n)
                        floor, steps = max(floor, f_n / f_wall), max(steps, s_ok / s_wall)
                        cpu_us = min(cpu_us, s_cpu / max(s_ok, 1) * 1e6)
                finally:
                    if schema is not None:
                        _drop_schema(args.pg, schema)
                want = targets.get((backend, procs))
                met = "met" if want is not None and steps >= want else "MISSED"
                verdict = "" if want is None else f"  target >= {want:,.0f}: {met}"
                expected = args.n // procs * procs
                if s_ok != expected:
                    print(f"  !! only {s_ok}/{expected} steps processed with one reply")
                    failed = True
                print(
                    f"{backend:8s} procs={procs}  steps/s={steps:8,.0f}"
                    f"  floor (bare INSERT+COMMIT)/s={floor:8,.0f}"
                    f"  ratio={steps / floor:5.2f}  client cpu/step={cpu_us:4.0f} us{verdict}"
                )
    # A missed target is printed, not an error (the machine is shared); a wrong result is.
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
