"""Concurrent outbox drainers (Store.outbox_claim), each on its own store over one ledger:
no claim returns more rows than its limit, and every due row is claimed exactly once
overall (no row held by two owners), on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, Store
from envelopay.protocol.messages import Invoice
from envelopay.protocol.outbound import Outbound

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
LOCAL = "drain@claims.test"
ROWS = 300
DRAINERS = 8  # half claim with limit=1, half with limit=3


def _seed(s: Store, n: int) -> list[str]:
    """Write `n` due outbox rows (no flow: any drainer may take any row)."""
    obs = [
        Outbound(
            LOCAL,
            "peer@claims.test",
            Invoice(id=f"inv_{i}", amount=i + 1, token="USDC", chain="solana", wallet="W"),
            f"<c{i}.{LOCAL}>",
            T0,
        )
        for i in range(n)
    ]
    commit = Commit(LOCAL, T0, {"status": "sent"}, outbox=tuple((ob, None) for ob in obs))
    assert s.commit_step(commit) == "ok"
    return [ob.message_id for ob in obs]


def _drain(s: Store, owner: str, limit: int, start: threading.Barrier, got: list[list[str]]) -> None:
    """Claim and mark sent until a claim comes back empty; record every claim's ids."""
    start.wait()
    lease = T0 + timedelta(minutes=5)
    while rows := s.outbox_claim(owner, T0, lease, limit=limit):
        got.append([r.outbound.message_id for r in rows])
        for r in rows:
            assert s.mark_sent(r.outbound.message_id, T0)


def _race(open_store: Callable[[], Store]) -> None:
    seeder = open_store()
    ids = _seed(seeder, ROWS)
    stores = [open_store() for _ in range(DRAINERS)]
    start = threading.Barrier(DRAINERS)
    claims: dict[int, list[list[str]]] = {i: [] for i in range(DRAINERS)}
    limits = {i: 1 if i % 2 == 0 else 3 for i in range(DRAINERS)}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            _drain(stores[i], f"w{i}", limits[i], start, claims[i])
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(DRAINERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a drainer hung"
    assert errors == []
    over = [(i, c) for i, cs in claims.items() for c in cs if len(c) > limits[i]]
    assert over == [], f"claims over their limit: {over[:5]}"
    counts = Counter(mid for cs in claims.values() for c in cs for mid in c)
    twice = [mid for mid, k in counts.items() if k > 1]
    assert twice == [], f"rows claimed more than once: {twice[:5]}"
    assert set(counts) == set(ids)  # every row claimed, once
    assert seeder.outbox_pending(T0 + timedelta(days=1)) == []
    for s in [seeder, *stores]:
        s.close()


def test_sqlite_concurrent_claims(tmp_path: Path) -> None:
    _race(lambda: SqliteStore(tmp_path / "ledger.db"))


@pytest.mark.parametrize("round_", range(3))
def test_postgres_concurrent_claims(pg_dsn: str, round_: int) -> None:
    # Several rounds: a plan that over-claims does so only under some interleavings.
    _race(lambda: PostgresStore(pg_dsn, max_size=1))
