"""`envelopay jobs list` as an operator reads it (seen on a new-user walk): the job id whole,
so it can be copied into `jobs refund JOB`, and what was paid in the asset's units
(`0.25 USDC`), while `--json` keeps the smallest units."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.ledger.sqlite import SqliteStore
from envelopay.node.init import init_agent
from envelopay.testing.store_jobs import sample_job

WORKER = "worker@garden.local"


def test_jobs_list_shows_whole_ids_and_human_amounts(tmp_path: Path) -> None:
    init_agent(tmp_path / "w", address=WORKER)
    conf = tmp_path / "w" / "envelopay.toml"
    store = SqliteStore(str(tmp_path / "w" / "var" / "agent.db"))  # the ledger `init` names
    store.migrate()
    job = replace(sample_job(WORKER, amount=250_000), chain="solana-local", state="held")
    assert store.job_add(job)
    store.close()
    text = CliRunner().invoke(app, ["jobs", "list", "-c", str(conf)], terminal_width=80)
    assert text.exit_code == 0, text.output
    assert job.job_id in text.output  # never folded or cut with an ellipsis
    assert "0.25 USDC" in text.output and "250000" not in text.output
    doc = CliRunner().invoke(app, ["jobs", "list", "-c", str(conf), "--json"])
    assert json.loads(doc.output)["jobs"][0]["amount"] == "250000"
