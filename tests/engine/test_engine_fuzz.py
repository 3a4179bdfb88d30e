"""100,000 hostile inputs through `Engine.handle` (issue 11, item 6): no exception
escapes, every input ends with an outcome, nothing is left half-claimed, and every
reply the engine wrote composes.

Seeded mutations of the conformance corpus (tests/engine/engine_fuzz.py), split over
one process per core, each with its own in-memory SQLite ledger and the deterministic
test rail (a few real transactions, so some proofs verify). ENVELOPAY_ENGINE_FUZZ sets
the count (default 100,000). A PostgreSQL slice runs the same generator on a sample.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from collections import Counter
from typing import Any

from tests._engines import worker
from tests.engine import engine_fuzz as fz

from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.protocol.compose import compose
from envelopay.testing import mock_rail as k

TOTAL = int(os.environ.get("ENVELOPAY_ENGINE_FUZZ", "100000"))
FINAL = {"processed", "refused", "ignored", "quarantined"}


def _rail() -> k.DictRail:
    txs = {f"tx{i}": k.Tx(k.WORKER_WALLET, k.TOKEN, amount) for i, amount in enumerate((100, 1, 7, 10**6))}
    return k.DictRail(txs)


async def _run(store: Store, raws: list[bytes]) -> dict[str, Any]:
    rail = _rail()
    eng = worker(store, rail, None)
    statuses: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    unrecorded: list[int] = []
    for i, raw in enumerate(raws):
        out = await eng.handle(raw)  # an exception here fails the run
        statuses[out.status] += 1
        codes[out.oops.value if out.oops else "-"] += 1
        recorded = out.status == "ignored" or (
            out.message_id is not None and store.inbound_outcome(k.WORKER, out.message_id) is not None
        )
        if out.status not in FINAL or not recorded:
            unrecorded.append(i)
    rows = store.outbox_pending(k.T0.replace(year=2100), limit=10**6)
    for row in rows:
        compose(row.outbound)  # every reply written can be sent
    return {"statuses": statuses, "codes": codes, "unrecorded": unrecorded[:20], "rows": len(rows)}


def _shard(args: tuple[int, int]) -> dict[str, Any]:
    seed, count = args
    raws, bodies = fz.corpus()
    store = SqliteStore(":memory:")
    try:
        result = asyncio.run(_run(store, fz.inputs(seed, count, raws, bodies)))
        with store.read() as x:
            result["claimed"] = x.one("SELECT count(*) FROM ep_inbound WHERE status <> 'done'")[0]  # type: ignore[index]
        return result
    finally:
        store.close()


def test_engine_fuzz_100k() -> None:
    procs = max(1, min(8, os.cpu_count() or 1))
    per = -(-TOTAL // procs)
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        results = pool.map(_shard, [(20261201 + i, per) for i in range(procs)])
    statuses: Counter[str] = sum((r["statuses"] for r in results), Counter())
    codes: Counter[str] = sum((r["codes"] for r in results), Counter())
    assert sum(statuses.values()) >= TOTAL
    assert all(r["unrecorded"] == [] for r in results), [r["unrecorded"] for r in results]
    assert all(r["claimed"] == 0 for r in results)  # nothing left half-claimed
    assert set(statuses) <= FINAL, statuses
    # The generator reaches the engine's answers, not only the parser's.
    assert {"processed", "refused", "ignored"} <= set(statuses), statuses
    assert {"invalid_json", "invalid_field", "unknown_ref", "payer_mismatch"} <= set(codes), codes


async def test_engine_fuzz_postgres_slice(pg_dsn: str) -> None:
    from envelopay.ledger.postgres import PostgresStore

    raws, bodies = fz.corpus()
    store = PostgresStore(pg_dsn, max_size=2)
    try:
        result = await _run(store, fz.inputs(7, 1500, raws, bodies))
    finally:
        store.close()
    assert result["unrecorded"] == [] and set(result["statuses"]) <= FINAL, result
