"""`envelopay show` reads each payment's amount in the asset's own units, the raw units
beside it (issue 30 item 3); `show --json` keeps the smallest-unit string. A real agent
made by `envelopay init`, its SQLite ledger written by the real engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.client.commands import config_decimals
from envelopay.config import load_config
from envelopay.engine import BaseApplication, Engine
from envelopay.node.init import init_agent
from envelopay.node.wiring import open_store
from envelopay.protocol.messages import Pay

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
