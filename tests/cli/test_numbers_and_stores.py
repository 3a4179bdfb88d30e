"""Issue 29, items 11 and 14: every numeric option is bounded (2**63 and 1e308 are bad
input, exit 2 naming the option, never an OverflowError traceback), and every command
taking a store (--db, or a config's ledger) answers a bad one by README's table: a URL
of no store we know given as a flag is bad input (2), in a config file a config error
(3); a store that does not open is the environment (3) — the same for serve and compact.
No command here starts anything: each is refused before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.node.init import init_agent

runner = CliRunner()
BIG = str(2**63)


def run(args: list[str]) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, json.loads(res.stdout)


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    init_agent(tmp_path / "a", address="a@garden.local")
    cfg = tmp_path / "a" / "envelopay.toml"
    unreachable = f'garden_root = "var/garden"\ngarden_socket = "{tmp_path}/no.sock"'
    cfg.write_text(cfg.read_text().replace('garden_root = "var/garden"', unreachable))
    return cfg


def _numbers(cfg: Path, tmp: Path) -> list[tuple[list[str], str]]:
    c = ["-c", str(cfg)]
    up = ["devnet", "up", "--home", str(tmp / "dn"), "--detach"]
    serve = ["enforcer", "serve", "--db", f"{tmp}/e.db", "--smtp-host", "127.0.0.1",
             "--operator-token-file", f"{tmp}/op.token"]
    return [
        (["ledger", "compact", *c, "--batch", BIG], "--batch"),
        (["ledger", "compact", *c, "--batch", "0"], "--batch"),
        (["garden", "serve", "--root", str(tmp), "-a", "a@garden.local", "--open", "--port", BIG], "--port"),
        (["garden", "serve", "--root", str(tmp), "-a", "a@garden.local", "--open", "--port", "-1"], "--port"),
        ([*serve, "--port", BIG], "--port"),
        ([*serve, "--smtp-port", "65536"], "--smtp-port"),
        ([*up, "--solana-port", BIG], "--solana-port"),
        ([*up, "--base-port", "70000"], "--base-port"),
        ([*up, "--finalized-after", BIG], "--finalized-after"),
        ([*up, "--confirmed-after", "-1"], "--confirmed-after"),
        (["verify", "--chain", "solana-local", "--token", "USDC", "--amount", "1", "--to", "x", "--tx", "y",
          "--confirmations", BIG], "--confirmations"),
        (["call", "kv@garden.local", *c, "--request", '{"key": "a"}', "--timeout", "1e308"], "--timeout"),
        (["which", "w@garden.local", *c, "--wait", "--timeout", "1e308"], "--timeout"),
        (["order", "w@garden.local", *c, "--task", '{"name": "digest"}', "--pay", "--timeout", "1e308"],
         "--timeout"),
        (["order", "w@garden.local", *c, "--task", '{"name": "digest"}', "--pay", "--max-amount", "9" * 5000],
         "--max-amount"),
    ]


def test_numbers_past_their_bounds_are_bad_input(agent: Path, tmp_path: Path) -> None:
    for args, field in _numbers(agent, tmp_path):
        code, doc = run(args)
        assert (code, doc["exit"], doc["field"]) == (2, 2, field), (args, doc)
        assert "Input should" not in doc["detail"], doc
    assert not (tmp_path / "dn").exists() and not (tmp_path / "e.db").exists()
    assert not (agent.parent / "var" / "agent.db").exists() or _no_rows(agent)


def _no_rows(cfg: Path) -> bool:
    import sqlite3

    with sqlite3.connect(cfg.parent / "var" / "agent.db") as db:
        return db.execute("SELECT COUNT(*) FROM ep_outbox").fetchone() == (0,)


@pytest.mark.parametrize("command", [
    ["enforcer", "serve", "--smtp-host", "127.0.0.1", "--operator-token-file", "{tmp}/op.token", "--db"],
    ["enforcer", "compact", "--db"],
])
@pytest.mark.parametrize(("db", "words"), [
    ("mysql://db/x", "mysql://"),  # a flag naming no store we know
    ("{tmp}/no/such/dir/e.db", "no such directory"),  # serve said 3 (sqlite open failed)
    ("{tmp}", "is not a file"),
    ("{tmp}/text.db", "is not a SQLite database"),
])
def test_every_db_flag_is_read_one_way(tmp_path: Path, command: list[str], db: str, words: str) -> None:
    (tmp_path / "text.db").write_text("not a database, only text long enough to hold a header\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in [*command, db]]
    got, doc = run(args)
    assert (got, doc["exit"], doc["error"], doc["field"]) == (2, 2, "usage", "--db"), doc
    assert words in doc["detail"], doc
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("command", [
    ["enforcer", "serve", "--smtp-host", "127.0.0.1", "--operator-token-file", "{tmp}/op.token", "--db"],
    ["enforcer", "compact", "--db"],
])
def test_a_store_server_that_does_not_answer_is_the_environment(tmp_path: Path, command: list[str]) -> None:
    # The test database server runs; this database does not exist. The server's own words
    # come back at once (a pool would wait out its 30 s and say only that it timed out).
    args = [a.replace("{tmp}", str(tmp_path)) for a in [*command, "postgresql://127.0.0.1:5432/no_such_db_h3"]]
    got, doc = run(args)
    assert (got, doc["exit"], doc["error"]) == (3, 3, "store"), doc
    assert 'database "no_such_db_h3" does not exist' in doc["detail"], doc


def test_a_store_in_a_config_file_is_a_config_error(agent: Path) -> None:
    agent.write_text(agent.read_text().replace('ledger = "var/agent.db"', 'ledger = "mysql://db/x"'))
    for args in (["ledger", "compact", "-c", str(agent)], ["flows", "-c", str(agent)]):
        code, doc = run(args)
        assert (code, doc["error"]) == (3, "config") and "agent.ledger" in doc["detail"], doc
