"""An evidence folder of a paid job that failed and was refunded says so (seen on a new-user
walk: `evidence verify` said `oops: seller answered task_failed` and nothing of the refund the
OOPS carried — in a dispute, the money sent back is what matters). The folder in
fixtures/evidence/refunded-job was written by the buyer on the walk's devnet
(`envelopay evidence FLOW --out DIR`); verify reads it offline, as anyone would."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app

FOLDER = Path(__file__).resolve().parents[2] / "fixtures" / "evidence" / "refunded-job"
runner = CliRunner()


def test_the_refund_an_oops_carries_is_a_claim_and_a_line() -> None:
    doc = json.loads(runner.invoke(app, ["evidence", "verify", str(FOLDER), "--json"]).stdout)
    assert (doc["exit"], doc["proven"]) == (0, True), doc
    [oops] = doc["claims"]["oops"]
    assert oops["by"] == "seller@garden.local" and oops["code"] == "task_failed"
    assert oops["refund"]["amount"] == "250000" and oops["refund"]["chain"] == "solana-local"
    assert oops["refund"]["proof"]["tx"].startswith("3dg6ubgq")
    said = runner.invoke(app, ["evidence", "verify", str(FOLDER)])
    assert said.exit_code == 0, said.output
    assert ("answered task_failed on 2026-12-04T23:51:33+00:00, refunding 0.25 USDC (250000 units) on "
            "solana-local to HK7iB5GtLF2Cgc6QzUVeubyP9cNcrj8iYBhtaScheMJL, tx 3dg6ubgq") in said.stdout
    assert "not checked on a chain" in said.stdout  # the worker's signed word, said as such
