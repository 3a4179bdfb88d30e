"""Issue 29, item 11: a configuration that is not one, and `init --dir` at a file, answer
with their documented error (README "Output and exit codes": a config error is 3, bad
input 2), never a traceback; a ledger URL of another scheme is refused, not turned into
a SQLite file named after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.node.init import init_agent

runner = CliRunner()


def _good(tmp_path: Path) -> str:
    init_agent(tmp_path / "a", address="a@garden.local")
    return (tmp_path / "a" / "envelopay.toml").read_text()


@pytest.mark.parametrize(("name", "make", "words"), [
    ("not UTF-8", lambda good: b"\xff\xfe" + good.encode(), "is not UTF-8 text"),
    ("not TOML", lambda good: b"[agent\n", "is not valid TOML"),
    ("arrays 200,000 deep", lambda good: b"x = " + b"[" * 200_000 + b"]" * 200_000 + b"\n", "too deeply"),
    ("tables 100,000 deep", lambda good: b"x = " + b"{a=" * 100_000 + b"1" + b"}" * 100_000 + b"\n",
     "too deeply"),
    ("5,000 digits", lambda good: good.replace('price = "0"', "price = " + "9" * 5_000).encode(),
     "a number too long"),
    ("an address that is a number", lambda good: good.replace('address = "a@garden.local"', "address = 5")
     .encode(), "agent.address: must be text"),
    ("a port past 65535", lambda good: good.replace('kind = "garden"', 'kind = "garden"\nlmtp_port = '
                                                   + str(2**63)).encode(),
     "transport.lmtp_port: must be at most 65535"),
    ("a poll interval of 1e308", lambda good: good.replace('kind = "garden"', 'kind = "garden"\n'
                                                          "agentmail_poll_interval = 1e308").encode(),
     "agentmail_poll_interval: must be at most 86400"),
    ("a poll interval of nan", lambda good: good.replace('kind = "garden"', 'kind = "garden"\n'
                                                        "agentmail_poll_interval = nan").encode(),
     "agentmail_poll_interval: must be a finite number"),
    ("a wait of nan seconds", lambda good: (good + "\n[wait]\nwindow = nan\n").encode(),
     "wait: window: must be 0 to 604,800 seconds"),
    ("a price keyed by no chain/token", lambda good: good.replace(
        'price = "0"', 'price = "0"\nprices = { "solana-local USDC" = "5" }').encode(),
     "prices: 'solana-local USDC' is not 'chain/token'"),
    ("a ledger of another scheme", lambda good: good.replace('ledger = "var/agent.db"',
                                                             'ledger = "mysql://db/x"').encode(),
     "agent.ledger: mysql:// is not a ledger"),
])
def test_a_config_that_is_not_one_is_a_config_error_3(tmp_path: Path, name: str, make: object,
                                                       words: str) -> None:
    cfg = tmp_path / "a" / "bad.toml"
    good = _good(tmp_path)
    cfg.write_bytes(make(good))  # type: ignore[operator]
    res = runner.invoke(app, ["flows", "-c", str(cfg), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["error"], doc["exit"]) == (3, "config", 3), doc
    assert words in doc["detail"] and "Input should" not in doc["detail"], doc
    assert not list((tmp_path / "a").glob("mysql*")) and not (tmp_path / "a" / "mysql:").exists()


@pytest.mark.parametrize("under", ["", "sub/dir"])
def test_init_dir_at_a_file_is_bad_input_and_writes_nothing(tmp_path: Path, under: str) -> None:
    file = tmp_path / "afile"
    file.write_text("mine\n")
    target = file / under if under else file
    res = runner.invoke(app, ["init", "--address", "x@garden.local", "--dir", str(target), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["field"], doc["exit"]) == (2, "--dir", 2), doc
    assert "is a file, not a directory" in doc["detail"]
    assert file.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


DEEP = b"[" * 200_000 + b"]" * 200_000


def test_a_garden_accounts_file_nested_200000_deep_is_a_config_error(tmp_path: Path) -> None:
    accounts = tmp_path / "accounts.json"
    accounts.write_bytes(DEEP)  # was a RecursionError traceback
    res = runner.invoke(app, ["garden", "serve", "--root", str(tmp_path), "-a", "a@garden.local",
                              "--accounts", str(accounts), "--port", "0", "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["error"]) == (3, "config") and "nested deeper" in doc["detail"], doc


def test_a_contact_book_nested_200000_deep_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mailbox").mkdir()
    (tmp_path / "mailbox" / "contacts.json").write_bytes(DEEP)
    res = runner.invoke(app, ["mail", "contacts", "list", "--dir", str(tmp_path), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert res.exit_code == 2 and "nested deeper" in doc["detail"], doc
