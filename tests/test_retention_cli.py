"""The CLI of retention and paging: `flows` pages, `ledger compact`, `enforcer compact`,
`garden compact` — real ledgers, stores and Maildirs."""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.enforcer.send.backends import open_store as open_enforcer_store
from envelopay.mail.maildir import deliver_file, ensure_maildir
from envelopay.node.agent_node import open_store
from envelopay.node.init import init_agent
from envelopay.testing.fill import LOCAL, fill_ledger

runner = CliRunner()


def _agent(tmp_path: Path, flows: int) -> Path:
    init_agent(tmp_path / "agent", address=LOCAL)
    cfg_path = tmp_path / "agent" / "envelopay.toml"
    cfg = load_config(cfg_path)
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    fill_ledger(store, flows)  # type: ignore[arg-type]
    store.close()
    return cfg_path


def test_flows_pages_then_ledger_compact(tmp_path: Path) -> None:
    cfg = _agent(tmp_path, 120)
    seen: list[str] = []
    args = ["flows", "-c", str(cfg), "--limit", "50"]
    pages = 0
    while True:
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        table = "\n".join(line for line in res.output.splitlines() if not line.startswith("more:"))
        seen += re.findall(r"\bf\d+\b", table)
        pages += 1
        more = re.search(r"more: .* --after (\S+)", res.output)
        if more is None:
            break
        args = ["flows", "-c", str(cfg), "--limit", "50", "--after", more.group(1).strip("'")]
    assert pages == 3 and seen == [f"f{i}" for i in range(120, 0, -1)]
    bad = runner.invoke(app, ["flows", "-c", str(cfg), "--after", "yesterday"])
    assert bad.exit_code == 2 and "not a flows page token" in bad.output

    res = runner.invoke(app, ["ledger", "compact", "-c", str(cfg), "--older-than", "30", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["flows"] == 120 and doc["removed"]["ep_log"] == 240
    assert doc["trimmed"] == {"ep_inbound": 120, "ep_replay": 120}
    again = runner.invoke(app, ["ledger", "compact", "-c", str(cfg), "--json"])
    assert json.loads(again.output)["flows"] == 0
    assert runner.invoke(app, ["ledger", "compact", "-c", str(cfg), "--older-than", "-1"]).exit_code == 2


def _enforcer_store(db: Path) -> None:
    """A store as `enforcer serve` makes it (compact never makes one)."""
    async def make() -> None:
        store = open_enforcer_store(str(db))
        await store.open()
        await store.close()

    asyncio.run(make())


def test_enforcer_and_garden_compact(tmp_path: Path) -> None:
    db = tmp_path / "enf.db"
    _enforcer_store(db)
    res = runner.invoke(app, ["enforcer", "compact", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) | {"cutoff": 0} == {"command": "enforcer compact", "ok": True, "exit": 0,
                                                       "cutoff": 0, "sends": 0, "outcomes": 0, "counters": 0,
                                                       "claims": 0, "spend_counters": 0, "payments": 0,
                                                       "refusals": 0}
    short = runner.invoke(app, ["enforcer", "compact", "--db", str(db), "--older-than", "0.001"])
    assert short.exit_code == 2 and "duplicate window" in short.output

    box = ensure_maildir(tmp_path / "garden" / "a@garden.test")
    path = deliver_file(box, b"Subject: x\r\n\r\nx\r\n")
    done = box / "cur" / f"{path.name}:2,S"
    os.rename(path, done)
    old = time.time() - 40 * 86400
    os.utime(done, (old, old))
    res = runner.invoke(app, ["garden", "compact", "--root", str(tmp_path / "garden"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["removed"] == 1 and not done.exists()
    missing = runner.invoke(app, ["garden", "compact", "--root", str(tmp_path / "nowhere")])
    assert missing.exit_code == 2


def _strict(text: str) -> dict[str, object]:
    """JSON as the contract says: no NaN or Infinity."""
    def refuse(name: str) -> object:
        raise ValueError(f"not JSON: {name}")

    doc: dict[str, object] = json.loads(text, parse_constant=refuse)
    return doc


def test_every_compact_bounds_its_window(tmp_path: Path) -> None:
    """--older-than beyond a century (1e12, inf) is a usage error (exit 2), not a traceback
    from datetime's range nor a cutoff of -Infinity in the JSON; a century itself runs."""
    cfg = _agent(tmp_path, 0)
    (tmp_path / "garden").mkdir()
    _enforcer_store(tmp_path / "enf.db")
    assert runner.invoke(app, ["mail", "check", "--dir", str(tmp_path / "agent")]).exit_code == 0
    commands = {
        "ledger compact": ["-c", str(cfg)],
        "enforcer compact": ["--db", str(tmp_path / "enf.db")],
        "garden compact": ["--root", str(tmp_path / "garden")],
        "mail compact": ["--dir", str(tmp_path / "agent")],
    }
    for command, args in commands.items():
        for days in ("1e12", "inf", "36500.5"):
            res = runner.invoke(app, [*command.split(), *args, "--older-than", days, "--json"])
            assert res.exit_code == 2 and "wants at most 36500" in res.output, (command, days, res.output)
        res = runner.invoke(app, [*command.split(), *args, "--older-than", "36500", "--json"])
        assert res.exit_code == 0, (command, res.output)
        assert _strict(res.output)["command"] == command
