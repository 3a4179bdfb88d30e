"""`envelopay jobs retry` keeps a job's history (SQLite and PostgreSQL): the round of
attempts a retry ends — how many, when each state was entered (the first attempt's
start, its end in `held`), the error — stays with the job (`rounds`, jobs schema v2), and
`jobs list` (job_doc) shows it after one retry and after two; this round's times start
over. A ledger whose jobs table is at v1, with a held job, upgrades in place."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from envelopay.ledger._sql_base import LEDGER_MIGRATIONS
from envelopay.ledger.jobs import JOBS_MIGRATIONS, JobMove, JobRound
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.node.job_admin import job_doc, retry_held
from envelopay.persist import Dialect, current, migrate
from envelopay.testing.store_jobs import T0, sample_job

LOCAL = "worker@retry.test"
LEASE = timedelta(seconds=30)


def _round(store: Store, job_id: str, start: int, error: str) -> None:
    """One round: claimed (an attempt starts) at T0+start s, held at T0+start+1 s."""
    t = T0 + timedelta(seconds=start)
    [(job, _)] = store.job_claim("w1", LOCAL, "slow", t, t + LEASE, 1)
    assert job.job_id == job_id
    held = JobMove(job_id, ("running",), "held", t + timedelta(seconds=1), {"error": error}, owner="w1")
    assert store.job_move(held)


def test_a_retry_keeps_the_earlier_rounds(store: Store) -> None:
    store.migrate()
    job = sample_job(LOCAL)
    assert store.job_add(job)
    _round(store, job.job_id, 10, "boom")
    first = retry_held(store, job.job_id, T0 + timedelta(seconds=20))
    assert first.done and first.job.state == "queued" and first.job.attempts == 0
    round1 = JobRound(1, {"queued": job.created_at, "running": T0 + timedelta(seconds=10),
                          "held": T0 + timedelta(seconds=11)}, "boom")
    assert first.job.rounds == (round1,)
    assert first.job.times() == {"queued": T0 + timedelta(seconds=20)}  # this round starts over

    _round(store, job.job_id, 30, "again")
    second = retry_held(store, job.job_id, T0 + timedelta(seconds=40))
    round2 = JobRound(1, {"queued": T0 + timedelta(seconds=20), "running": T0 + timedelta(seconds=30),
                          "held": T0 + timedelta(seconds=31)}, "again")
    assert second.job.rounds == (round1, round2)
    again = store.job_get(job.job_id)
    assert again is not None and again.rounds == (round1, round2)
    shown = job_doc(again)["rounds"]
    assert shown[0] == {"attempts": 1, "error": "boom",
                        "at": {"queued": job.created_at.isoformat(),
                               "running": (T0 + timedelta(seconds=10)).isoformat(),
                               "held": (T0 + timedelta(seconds=11)).isoformat()}}
    assert shown[1]["at"]["running"] == (T0 + timedelta(seconds=30)).isoformat()
    assert job_doc(again)["at"] == {"queued": (T0 + timedelta(seconds=40)).isoformat()}
    # A job that is not held is not retried, and its history is left as it is.
    assert not store.job_move(JobMove(job.job_id, ("held",), "queued", T0, {"rounds": []}))
    assert store.job_get(job.job_id) == again


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqliteStore | PostgresStore]:
    made = (SqliteStore(tmp_path / "l.db", migrate=False) if request.param == "sqlite"
            else PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2, migrate=False))
    yield made
    made.close()


def test_a_v1_jobs_table_upgrades_with_its_held_job(unmigrated: SqliteStore | PostgresStore) -> None:
    store = unmigrated
    dialect: Dialect = "postgres" if isinstance(store, PostgresStore) else "sqlite"
    with store.write() as x:  # the newest ledger, its jobs table as v1 made it
        migrate(x, dialect, LEDGER_MIGRATIONS, "2026-01-01T00:00:00+00:00")
        assert migrate(x, dialect, JOBS_MIGRATIONS, "2026-01-01T00:00:00+00:00", 1) == 1
    job = sample_job(LOCAL, 2)
    assert store.job_add(job)  # v1's columns only
    with store.write() as x:  # held after three attempts, as the runner leaves it
        x.exec("UPDATE ep_jobs SET state = 'held', attempts = 3, error = 'old', held_at = ? WHERE job_id = ?",
               (store.t(T0), job.job_id))
    store.migrate()
    with store.read() as x:
        assert current(x, dialect, "jobs") == 2
    old = store.job_get(job.job_id)
    assert old is not None and old.state == "held" and old.rounds == () and job_doc(old)["rounds"] == []
    act = retry_held(store, job.job_id, T0 + timedelta(seconds=5))
    assert act.job.rounds == (JobRound(3, {"queued": job.created_at, "held": T0}, "old"),)
