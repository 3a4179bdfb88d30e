"""`envelopay show` reads each payment's amount in the asset's own units, the raw units
beside it (issue 30 item 3); `show --json` keeps the smallest-unit string. A real agent
made by `envelopay init`, its SQLite ledger written by the real engine."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.buyer import Answer
from envelopay.client.commands import ClientRun, config_decimals
from envelopay.client.report import client_report
from envelopay.config import load_config
from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outcome import Outcome, Sent
from envelopay.node.agent_node import open_store
from envelopay.node.init import init_agent
from envelopay.protocol import compose_message
from envelopay.protocol.messages import Invoice, Pay
from envelopay.rails.amounts import Decimals

CLIENT = "client@garden.local"
WORKER = "worker@garden.local"
runner = CliRunner()


def _paid_flow(config: Path, amount: int, token: str, chain: str) -> str:
    """A PAY recorded by the agent's own engine (its outbox row waits undelivered)."""
    cfg = load_config(config)
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        engine = Engine(store, address=CLIENT, domain="garden.local", rails={}, app=BaseApplication())
        pay = Pay(id="pay_amt", amount=amount, token=token, chain=chain, proof={"tx": "5xAmountsTx"})
        sent = asyncio.run(engine.send(pay, WORKER))
    finally:
        store.close()
    return sent.flow_id


def test_show_says_the_amount_as_a_person_reads_it(tmp_path: Path) -> None:
    init_agent(tmp_path / "client", address=CLIENT)
    config = tmp_path / "client" / "envelopay.toml"
    flow = _paid_flow(config, 250_000, "USDC", "solana-local")
    res = runner.invoke(app, ["show", flow, "-c", str(config)], env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    assert "0.25 (250000 units)" in res.output
    res = runner.invoke(app, ["show", flow, "-c", str(config), "--json"])
    assert res.exit_code == 0, res.output
    assert [p["amount"] for p in json.loads(res.output)["payments"]] == ["250000"]


def test_the_registry_comes_from_the_config_without_a_chain(tmp_path: Path) -> None:
    init_agent(tmp_path / "client", address=CLIENT)
    config = tmp_path / "client" / "envelopay.toml"
    with config.open("a", encoding="utf-8") as f:  # an operator's own asset, by override
        f.write("\n[rails.base.assets.base-local.WETH]\n"
                'address = "0x4200000000000000000000000000000000000006"\ndecimals = 18\n')
    decimals = config_decimals(load_config(config))
    assert decimals("solana-local", "USDC") == 6
    assert decimals("solana-local", "sol") == 9  # a symbol in any case
    assert decimals("base-local", "WETH") == 18
    assert decimals("base-local", "0x4200000000000000000000000000000000000006") == 18  # by address
    assert decimals("solana-local", "NOPE") is None
    flow = _paid_flow(config, 7, "NOPE", "solana-local")
    res = runner.invoke(app, ["show", flow, "-c", str(config)], env={"COLUMNS": "250"})
    assert res.exit_code == 0 and "7 units" in res.output  # unknown decimals: never read as whole ones


def test_a_client_commands_summary_says_what_was_paid_and_asked(tmp_path: Path) -> None:
    init_agent(tmp_path / "client", address=CLIENT)
    config = tmp_path / "client" / "envelopay.toml"
    cfg = load_config(config)
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        engine = Engine(store, address=CLIENT, domain="garden.local", rails={}, app=BaseApplication())
        pay = Pay(id="pay_sum", amount=250_000, token="USDC", chain="base-local", proof={"tx": "0xabc"})
        sent = asyncio.run(engine.send(pay, WORKER))
    finally:
        store.close()
    decimals = config_decimals(cfg)
    wallet = "0x1a2B3c4D5e6F708192a3B4c5D6e7F8091a2B3c4D"
    rep = client_report("pay", ClientRun("PAY", sent, queued="connection refused"), timeout=5,
                        recipient=wallet, decimals=decimals)
    # Paid first, then queued: the summary still says where the money went.
    assert f"paid 0.25 USDC (250000 units) on base-local to {wallet}" in rep.lines
    assert rep.document["paid"]["amount"] == "250000"  # the JSON keeps smallest units
    invoice = Invoice(id="inv_s", amount=1_500_000_000, token="SOL", chain="solana-local",
                      wallet="6dL6n77jJFWq4bu3cQp57H8rMUPEXu7uYN1XApPxpUif")
    asked = "the INVOICE asks 1.5 SOL (1500000000 units) on solana-local"
    assert asked in _invoice_lines(sent, invoice, decimals)


def _invoice_lines(sent: Sent, invoice: Invoice, decimals: Decimals) -> tuple[str, ...]:
    """The summary of an ORDER answered by `invoice`, as the client follows it."""
    answer = Answer(message=invoice, outcome=Outcome(status="processed", flow_id="f1", state="invoiced"))
    return client_report("order", ClientRun("ORDER", sent, answer=answer), timeout=5, decimals=decimals).lines


def test_show_names_the_wallet_the_buyers_pay_paid(tmp_path: Path) -> None:
    """The buyer's outgoing PAY settles an INVOICE: `show`'s `to` is the INVOICE's wallet
    (issue 30 item 5: the column was empty, as a PAY carries no wallet)."""
    init_agent(tmp_path / "client", address=CLIENT)
    config = tmp_path / "client" / "envelopay.toml"
    cfg = load_config(config)
    wallet = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        engine = Engine(store, address=CLIENT, domain="garden.local", rails={}, app=BaseApplication())
        bill = Invoice(id="inv_to", amount=250_000, token="USDC", chain="solana-local", wallet=wallet)
        raw, _ = compose_message(bill, sender=WORKER, recipient=CLIENT, domain="garden.local",
                                 now=datetime.now(UTC))
        got = asyncio.run(engine.handle(raw))
        pay = Pay(id="pay_to", amount=250_000, token="USDC", chain="solana-local", proof={"tx": "5xToTx"},
                  invoice_ref="inv_to")
        asyncio.run(engine.send(pay, WORKER, flow_id=got.flow_id))
    finally:
        store.close()
    assert got.flow_id is not None
    res = runner.invoke(app, ["show", got.flow_id, "-c", str(config), "--json"])
    assert res.exit_code == 0, res.output
    [paid] = json.loads(res.stdout)["payments"]
    assert (paid["message"], paid["to"]) == ("pay", wallet)
    res = runner.invoke(app, ["show", got.flow_id, "-c", str(config)], env={"COLUMNS": "250"})
    assert wallet in res.output
