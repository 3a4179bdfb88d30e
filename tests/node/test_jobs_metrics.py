"""The worker's `/metrics` shows its jobs (issue 30 item 2 asks for jobs; README said "the
worker has none yet" after issue 31 gave it jobs): those not finished, by state, and the
wait of the oldest queued one, read from the ledger at scrape time, on both backends; a
finished job and another worker's job on a shared ledger are not counted."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from envelopay.ledger.jobs import JobMove
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.node.metrics import WorkerMetrics
from envelopay.testing.store_jobs import T0, sample_job


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    store: Store = (SqliteStore(str(tmp_path / "ledger.db")) if request.param == "sqlite"
                    else PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2))
    store.migrate()
    return store


def jobs_gauges(metrics: WorkerMetrics) -> dict[tuple[str, str], float]:
    text = metrics.exposition().decode()
    return {(s.name, s.labels.get("state", "")): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name.startswith("envelopay_worker_jobs")}


def test_jobs_gauges_count_unfinished_jobs_by_state(ledger: Store, tmp_path: Path) -> None:
    me = f"worker-{tmp_path.name[-12:]}@jobs.test".lower()  # its own address on a shared database
    metrics = WorkerMetrics(ledger, me, clock=lambda: T0 + timedelta(seconds=100))
    try:
        empty = jobs_gauges(metrics)
        assert empty[("envelopay_worker_jobs", "queued")] == 0
        assert empty[("envelopay_worker_jobs_oldest_queued_seconds", "")] == 0
        states = ["queued", "queued", "running", "held", "done", "refunded"]
        for n, state in enumerate(states, start=1):  # created T0+1 s … T0+6 s, queued
            job = sample_job(me, n)
            assert ledger.job_add(job)
            if state != "queued":
                assert ledger.job_move(JobMove(job.job_id, ("queued",), state, T0 + timedelta(seconds=n)))
        assert ledger.job_add(sample_job(f"other-{me}", 1))  # another worker's queued job
        got = jobs_gauges(metrics)
        assert {k[1]: v for k, v in got.items() if k[0] == "envelopay_worker_jobs"} == {
            "queued": 2, "running": 1, "failed": 0, "held": 1, "refunding": 0}
        assert got[("envelopay_worker_jobs_oldest_queued_seconds", "")] == 99  # the first, at T0+1 s
    finally:
        ledger.close()
