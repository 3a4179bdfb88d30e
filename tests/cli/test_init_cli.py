"""`envelopay init`: config with local defaults, keys generated, refusals exit 2."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.node.keys import evm_address, solana_pubkey
from envelopay.worker.tasks import TaskBook

runner = CliRunner()


def test_init_writes_loadable_config_and_private_keys(tmp_path: Path) -> None:
    res = runner.invoke(app, ["init", "--dir", str(tmp_path), "--address", "Bob@Garden.local"])
    assert res.exit_code == 0, res.output
    cfg = load_config(tmp_path / "envelopay.toml")
    assert cfg.agent.address == "bob@garden.local"
    assert cfg.agent.domain == "garden.local"
    wallets = {(a.chain, a.token): a.wallet for a in cfg.accept}
    assert wallets[("solana-local", "USDC")] == solana_pubkey(tmp_path / "keys" / "solana.json")
    assert wallets[("base-local", "USDC")] == evm_address(tmp_path / "keys" / "base.key")
    assert set(TaskBook.from_config(cfg).names()) == {"word_count", "digest"}
    for name in ("dkim.pem", "solana.json", "base.key"):
        mode = stat.S_IMODE((tmp_path / "keys" / name).stat().st_mode)
        assert mode == 0o600, name
    assert len(json.loads((tmp_path / "keys" / "solana.json").read_text())) == 64
    assert (tmp_path / "keys" / "dkim.txt").read_text().startswith("v=DKIM1; k=rsa; p=")


def test_init_refuses_to_overwrite_and_force_keeps_keys(tmp_path: Path) -> None:
    assert runner.invoke(app, ["init", "--dir", str(tmp_path)]).exit_code == 0
    key = (tmp_path / "keys" / "dkim.pem").read_bytes()
    res = runner.invoke(app, ["init", "--dir", str(tmp_path)])
    assert res.exit_code == 2 and "already exist" in res.output
    res = runner.invoke(app, ["init", "--dir", str(tmp_path), "--force", "--address", "z@garden.local"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "keys" / "dkim.pem").read_bytes() == key
    assert load_config(tmp_path / "envelopay.toml").agent.address == "z@garden.local"


def test_init_bad_address_names_the_field(tmp_path: Path) -> None:
    res = runner.invoke(app, ["init", "--dir", str(tmp_path), "--address", "a@b.example\r\nBcc: x@y"])
    assert res.exit_code == 2
    assert "--address" in res.output
    assert not (tmp_path / "envelopay.toml").exists()


def test_worker_serve_and_client_with_a_bad_config_exit_3(tmp_path: Path) -> None:
    res = runner.invoke(app, ["worker", "serve", "--config", str(tmp_path / "missing.toml")])
    assert res.exit_code == 3 and "cannot read config" in res.output  # config error: the environment
    (tmp_path / "bad.toml").write_text('[agent]\naddress = "x@y.example"\ndomain = "y.example"\nbogus = 1\n')
    res = runner.invoke(app, ["which", "w@y.example", "--config", str(tmp_path / "bad.toml")])
    assert res.exit_code == 3 and "agent.bogus" in res.output


def test_client_with_the_garden_down_queues_and_says_so(tmp_path: Path) -> None:
    assert runner.invoke(app, ["init", "--dir", str(tmp_path)]).exit_code == 0
    cfg = tmp_path / "envelopay.toml"
    cfg.write_text(cfg.read_text().replace('garden_root = "var/garden"',
                                           'garden_root = "var/garden"\nlmtp_port = 9'))
    res = runner.invoke(app, ["which", "worker@garden.local", "--config", str(cfg)])
    assert res.exit_code == 3, res.output  # the transport is down: the environment (issue 15)
    assert "queued WHICH" in res.output and "not delivered yet" in res.output
    res = runner.invoke(app, ["which", "worker@garden.local", "--config", str(cfg), "--json"])
    assert res.exit_code == 3
    doc = json.loads(res.stdout)
    assert doc["queued"] is True and doc["delivery"] == "queued" and doc["exit"] == 3
    res = runner.invoke(app, ["outbox", "--config", str(cfg), "--json"])
    assert res.exit_code == 0
    queued = json.loads(res.stdout)["queued"]
    assert doc["sent"]["message_id"] in {q["message_id"] for q in queued} and len(queued) == 2
    res = runner.invoke(app, ["drain", "--config", str(cfg), "--json"])
    assert res.exit_code == 3 and len(json.loads(res.stdout)["retry"]) >= 1
