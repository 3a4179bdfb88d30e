"""`envelopay jobs retry JOB --json` on a held job, for real on the worker's ledger: exit
0 and one document valid against schemas/cli-output.schema.json (`jobs_action`), the job
queued again with fresh attempts, the round it ended kept (`rounds`, in `jobs list` too);
the JSON contract's world holds no held job (it has no chain), so this is where the
success document is checked."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.ledger.jobs import JobMove
from envelopay.ledger.sqlite import SqliteStore
from envelopay.node.init import init_agent
from envelopay.testing.store_jobs import sample_job

WORKER = "worker@garden.local"
SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "schemas" / "cli-output.schema.json").read_text())


def test_jobs_retry_of_a_held_job_prints_its_document(tmp_path: Path) -> None:
    init_agent(tmp_path / "w", address=WORKER)
    conf = str(tmp_path / "w" / "envelopay.toml")
    store = SqliteStore(str(tmp_path / "w" / "var" / "agent.db"))  # the ledger `init` names
    store.migrate()
    job = replace(sample_job(WORKER, amount=250_000), chain="solana-local")
    assert store.job_add(job)
    # Held as a failed `hold` task's job is (the runner's moves, written directly here).
    assert store.job_move(JobMove(job.job_id, ("queued",), "held", datetime.now(UTC), {"attempts": 3}))
    store.close()
    res = CliRunner().invoke(app, ["jobs", "retry", job.job_id, "-c", conf, "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    jsonschema.validate(doc, SCHEMA)
    jsonschema.validate(doc, {**SCHEMA, "$ref": "#/$defs/jobs_action"} | {"anyOf": [True]})
    assert (doc["command"], doc["job"], doc["state"]) == ("jobs retry", job.job_id, "queued")
    assert doc["attempts"] == 0
    # The round the retry ended stays in the document: its attempts, its times, its error.
    [ended] = doc["rounds"]
    assert ended["attempts"] == 3 and set(ended["at"]) == {"queued", "held"} and ended["error"] is None
    listed = CliRunner().invoke(app, ["jobs", "list", "-c", conf, "--json"])
    assert json.loads(listed.stdout)["jobs"][0]["rounds"] == [ended]
    again = CliRunner().invoke(app, ["jobs", "retry", job.job_id, "-c", conf, "--json"])
    assert again.exit_code == 2 and "only a held job" in json.loads(again.stdout)["detail"]
