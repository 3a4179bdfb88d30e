"""`envelopay refunds list|retry` as an operator reads them: a failed underpayment refund
(`pay:` key) listed with its amount in the asset's units (`0.25 USDC`; --json keeps the
smallest units), a paid one only with --all, and bad input to retry answered with exit 2
before anything is built or paid."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.ledger.sqlite import SqliteStore
from envelopay.node.init import init_agent

WORKER = "worker@garden.local"


def _order(key: str) -> RefundOrder:
    return RefundOrder(key=key, local=WORKER, peer="buyer@garden.local", flow_id="flow_1",
                       chain="solana-local", token="USDC", amount=250_000, recipient="BuyerWallet",
                       reason="amount_mismatch")


def test_refunds_list_and_retry_answer_the_operator(tmp_path: Path) -> None:
    init_agent(tmp_path / "w", address=WORKER)
    conf = str(tmp_path / "w" / "envelopay.toml")
    store = SqliteStore(str(tmp_path / "w" / "var" / "agent.db"))  # the ledger `init` names
    store.migrate()
    now = datetime.now(UTC)
    book = RefundBook(store, now=now)
    for key in ("pay:solana-local:failed", "pay:solana-local:paid"):
        book.claim(_order(key), owner="w", now=now, lease_until=now)
    book.failed("pay:solana-local:failed", "w", "insufficient funds", now)
    book.paid("pay:solana-local:paid", "w", {"tx": "t"}, "t", now)
    store.close()
    run = CliRunner()
    text = run.invoke(app, ["refunds", "list", "-c", conf], terminal_width=80)
    assert text.exit_code == 0, text.output
    assert "pay:solana-local:failed" in text.output and "0.25 USDC" in text.output
    assert "250000" not in text.output and "pay:solana-local:paid" not in text.output
    doc = json.loads(run.invoke(app, ["refunds", "list", "--all", "-c", conf, "--json"]).stdout)
    assert {(r["key"], r["status"], r["amount"]) for r in doc["refunds"]} == {
        ("pay:solana-local:failed", "failed", "250000"), ("pay:solana-local:paid", "paid", "250000")}
    for key, why in (("pay:solana-local:paid", "paid already"), ("job:job_1", "no refund"),
                     ("pay:none", "no refund")):
        res = run.invoke(app, ["refunds", "retry", key, "-c", conf, "--json"])
        assert res.exit_code == 2, res.output
        assert why in json.loads(res.stdout)["detail"]
