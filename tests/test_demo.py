"""`envelopay demo` end to end: every expectation holds, and the CLI says so by exit code."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.demo import DemoResult, Row, run_demo


def test_demo_every_expectation_holds(tmp_path: Path) -> None:
    result = asyncio.run(run_demo(tmp_path))
    assert result.failures == []
    got = {r.message: r.got for r in result.rows}
    assert got["PAY replaying a spent proof"].startswith("OOPS proof_replayed")
    # The underpaid PAY's money goes back in full with the OOPS (SPEC.md "Refunds").
    assert got["PAY with an underpaid proof"] == "OOPS amount_mismatch, refunded 0.249999 USDC; flow invoiced"
    assert got["PAY to the wrong recipient"].startswith("OOPS recipient_mismatch")
    assert got["PAY with a forged DKIM signature"].startswith("OOPS dkim_failed")
    # An insider sending From another garden address is stopped by the garden itself.
    assert got["PAY From the buyer by another insider"].startswith("garden 550 5.7.1; worker saw nothing")
    assert len(result.rows) == 18
    assert sum(r.message.startswith("PAY (paid") and r.got.startswith("FULFILL") for r in result.rows) == 2
    assert got["ACCEPT proof, as the buyer verifies it"] == "accepted"
    # Kept: Solana flow 1 + forged (Mallory's money) + honest; the underpaid 249,999 went back.
    assert result.facts["worker_usdc_solana"] == 250_000 * 3
    # The buyer paid flow 1, the underpaid, the wrong recipient and the honest PAY, and got
    # the underpaid back once: 50 USDC less 3 × 0.25.
    assert result.facts["buyer_usdc_solana"] == 50_000_000 - 250_000 * 3
    assert result.ok


def test_a_deviation_makes_the_result_fail() -> None:
    good = Row("s", "B→W", "m", "x", "x", True)
    bad = Row("s", "B→W", "m", "y", "x", False)
    assert DemoResult([good]).ok
    assert not DemoResult([good, bad]).ok
    assert DemoResult([good, bad]).failures == [bad]
    assert not DemoResult([]).ok  # a demo that checked nothing proved nothing


def test_demo_cli_table_and_exit_code(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["demo", "--keep", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "expectations held" in res.output
    assert "proof_replayed" in res.output
    assert (tmp_path / "out" / "worker.db").exists()
    text = " ".join(res.output.split())  # the table and the closing line wrap at the terminal's width
    assert "0.249999" in text
    assert "hold 0.75 USDC (750000 units) on solana-local (the underpaid attack's money refunded" in text
