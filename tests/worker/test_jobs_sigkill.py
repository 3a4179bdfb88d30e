"""A worker killed mid-job loses nothing (issue 31 item 1), on both ledger backends: the
job's runner is a real process, SIGKILLed while the handler runs; another runner process
takes the job over when the lease runs out. An idempotent task runs again and is
FULFILLed exactly once; a task that is not idempotent is failed and settled by its
failure policy (OOPS task_failed, once) — never a second answer, never a forgotten job."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.worker import _jobs_kit as jk

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Fulfill, Oops
from envelopay.testing import mock_rail as k

# Run as a module from the repository root: it and its task handlers import tests.worker._jobs_kit.
ROOT = Path(__file__).resolve().parents[2]
PROC = "tests.worker._job_proc"


def _where(store: Store) -> tuple[str, str]:
    if isinstance(store, SqliteStore):
        return "sqlite", store.path
    assert isinstance(store, PostgresStore)
    return "postgres", store.dsn


def _start(store: Store, owner: str, task: dict[str, Any]) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-m", PROC, *_where(store), owner, json.dumps(task)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _wait(pred: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _starts(marker: Path) -> int:
    return len(marker.read_text().splitlines()) if marker.exists() else 0


@pytest.mark.parametrize("idempotent", [True, False])
async def test_a_worker_killed_mid_job_loses_nothing(store: Store, tmp_path: Path, idempotent: bool) -> None:
    rail = k.DictRail()
    task = jk.task("paid", "tests.worker._jobs_kit:nap", price="100", idempotent=idempotent)
    engine = jk.worker(store, jk.config(task), rail)
    marker = tmp_path / "starts"
    order = jk.prepaid(rail, "o-kill", "tx-kill", name="paid", amount=100, seconds=1.5, marker=str(marker))
    out = await engine.handle(k.raw(order))
    job = store.job_for_flow(out.flow_id or "")
    assert job is not None and job.state == "queued" and job.paid

    first = _start(store, "w-first", task)
    try:
        _wait(lambda: _starts(marker) == 1)
        first.send_signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
    finally:
        first.kill()
    running = store.job_get(job.job_id)
    assert running is not None and running.state == "running" and running.lease_owner == "w-first"

    second = _start(store, "w-second", task)
    try:
        _wait(lambda: (store.job_get(job.job_id) or job).answer_id is not None)
        await asyncio.sleep(1.5)  # more polls, scans and lease ends: nothing more is said
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait(10)
    final = store.job_get(job.job_id)
    assert final is not None
    answers = [e for e in store.flow_log(job.flow_id) if e.direction == "out"]
    assert len(answers) == 1  # one answer, whatever happened
    row = store.outbox_get(final.answer_id or "")
    assert row is not None
    if idempotent:
        assert final.state == "done" and final.attempts == 2 and _starts(marker) == 2
        assert isinstance(row.outbound.message, Fulfill) and row.outbound.message.result["slept"] == 1.5
    else:
        assert final.state == "failed" and _starts(marker) == 1  # never run twice
        assert final.error is not None and "not idempotent" in final.error
        assert isinstance(row.outbound.message, Oops) and row.outbound.message.error is not None
        assert row.outbound.message.error.code == "task_failed"
