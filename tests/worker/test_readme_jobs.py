"""README "Selling work that takes time", run as written (issue 31): the reviewer script
and its task as the README shows them, saved beside the session, and the README's block
run as one bash session in a devnet of its own (its ports left to the system). Then the
seller's ledger is read: the paid ORDER became a job, done, its FULFILL the script's
output, its result hash recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests import readme_run as rr

from envelopay.config import load_config
from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.messages import Fulfill
from envelopay.worker.runner import result_hash

WORLD = "tests/worker/test_readme_jobs.py"


def _block(name: str) -> str:
    after = rr.README.read_text().split(f"<!-- readme:{name} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


def test_selling_work_that_takes_time_runs_as_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "review.py").write_text(_block("jobs-command"))
    (work / "task.toml").write_text(_block("jobs-task"))
    blocks = [b for b in rr.blocks() if b.world == WORLD]
    assert len(blocks) == 1
    env = rr.shell_env(tmp_path)
    try:
        ran = rr.run_session(rr.script(blocks), work, env, timeout=240)
    finally:
        rr.devnet_down(work, env)
    if ran.timed_out:
        pytest.fail(f"the session did not end in 240 s:\n{ran.out[-6000:]}")
    assert ran.returncode == 0 and "+ all README lines ran" in ran.out, ran.out[-8000:]

    cfg = load_config(work / "seller" / "envelopay.toml")
    store = SqliteStore(cfg.path(cfg.agent.ledger))
    try:
        (job,) = store.job_list(cfg.agent.address)
        assert job.task == "review" and job.state == "done" and job.paid and job.amount == 250000
        assert job.payer and job.chain == "solana-local"
        row = store.outbox_get(job.answer_id or "")
        assert row is not None and isinstance(row.outbound.message, Fulfill)
        result = {"verdict": "approved", "words": 4}
        assert row.outbound.message.result == result and job.result_hash == result_hash(result)
    finally:
        store.close()
