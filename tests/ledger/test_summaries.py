"""The console's read-only summaries (envelopay.testing.check_summaries) on both ledger
backends, a store that miscounts failing the kit by name, and the jobs and refunds that
their own stores wrote read back by state."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from envelopay.ledger.jobs import Job, JobMove
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.summaries import FlowCount
from envelopay.testing.summaries import SUMMARY_CHECKS, T0, check_summaries

NAMES = [c.__name__ for c in SUMMARY_CHECKS]


def test_sqlite_summaries(tmp_path: Path) -> None:
    n = itertools.count()
    made: list[SqliteStore] = []

    def factory() -> SqliteStore:
        made.append(SqliteStore(tmp_path / f"ledger{next(n)}.db"))
        return made[-1]

    assert check_summaries(factory) == NAMES
    for s in made:
        s.close()


def test_postgres_summaries(pg_dsn: str) -> None:
    made: list[PostgresStore] = []

    def factory() -> PostgresStore:
        made.append(PostgresStore(pg_dsn, max_size=2))
        return made[-1]

    assert check_summaries(factory) == NAMES
    for s in made:
        s.close()


def test_a_store_that_miscounts_fails_the_kit(tmp_path: Path) -> None:
    class Miscounts(SqliteStore):
        def flow_counts(self, local: str) -> list[FlowCount]:
            return super().flow_counts(local)[1:]

    with pytest.raises(AssertionError, match="check_flow_counts_and_filters"):
        check_summaries(lambda: Miscounts(tmp_path / "m.db"))


def _job(local: str, n: int, at: datetime, *, amount: int = 250000) -> Job:
    return Job(job_id=f"job_{n}", local=local, peer="buyer@x", flow_id=f"flow_{n}", task="word_count",
               params={"name": "word_count"}, order_id=f"ord_{n}", ref=f"pay_{n}", message_id=f"<p{n}@x>",
               chain="solana-local" if amount else None, token="USDC" if amount else None, amount=amount,
               payer="W" if amount else None, proof=None, proof_key=None, policy="refund", idempotent=True,
               state="queued", attempts=0, created_at=at, updated_at=at)


def _jobs_and_refunds(store: SqliteStore | PostgresStore) -> None:
    """Jobs written by the jobs store and a refund by the refunds book, read back by state."""
    local = "worker@summaries.test"
    for n in range(3):
        assert store.job_add(_job(local, n, T0 + timedelta(seconds=n), amount=0 if n == 2 else 250000))
    assert store.job_add(_job("other@summaries.test", 9, T0))  # another agent's: never counted
    assert store.job_move(JobMove("job_0", ("queued",), "running", T0 + timedelta(seconds=5)))
    failed = JobMove("job_0", ("running",), "failed", T0 + timedelta(seconds=6), {"error": "boom"})
    assert store.job_move(failed)
    assert store.job_counts(local) == {"failed": 1, "queued": 2}
    jobs = store.recent_jobs(local)
    assert [(j.job_id, j.state, j.amount, j.chain, j.error) for j in jobs] == [
        ("job_0", "failed", 250000, "solana-local", "boom"), ("job_2", "queued", 0, None, None),
        ("job_1", "queued", 250000, "solana-local", None)]
    assert [j.job_id for j in store.recent_jobs(local, states=("queued",))] == ["job_2", "job_1"]

    assert store.refund_counts(local) in (None, {})  # no refunds table yet, or an empty one
    assert store.refunds_paid_since(local, T0) == []
    book = RefundBook(store, now=T0)
    order = RefundOrder("job:job_0", local, "buyer@x", "flow_0", "solana-local", "USDC", 250000, "W",
                        "task_failed")
    claimed, _ = book.claim(order, owner="w1", now=T0, lease_until=T0 + timedelta(minutes=1))
    assert claimed == "new"
    assert book.paid("job:job_0", "w1", {"tx": "T1"}, "T1", T0 + timedelta(seconds=7))
    assert store.refund_counts(local) == {"paid": 1}
    [refund] = store.recent_refunds(local)
    assert (refund.key, refund.amount, refund.status, refund.tx_id, refund.reason) == (
        "job:job_0", 250000, "paid", "T1", "task_failed")
    # What went back, beside the console's revenue: paid refunds since a time (paid at T0+7 s).
    assert store.refunds_paid_since(local, T0) == [refund]
    assert store.refunds_paid_since(local, T0 + timedelta(seconds=8)) == []
    assert store.refunds_paid_since("other@summaries.test", T0) == []


def test_jobs_and_refunds_read_back_on_sqlite(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "jobs.db")
    try:
        _jobs_and_refunds(store)
    finally:
        store.close()


def test_jobs_and_refunds_read_back_on_postgres(pg_dsn: str) -> None:
    store = PostgresStore(pg_dsn, max_size=2)
    try:
        _jobs_and_refunds(store)
    finally:
        store.close()
