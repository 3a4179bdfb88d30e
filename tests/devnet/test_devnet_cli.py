"""`envelopay devnet up --detach | status | down` and `envelopay fund` as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from solders.keypair import Keypair

ENVELOPAY = [sys.executable, "-m", "envelopay.cli"]
FAST = ["--solana-port", "0", "--base-port", "0", "--slot-time", "0.05", "--confirmed-after", "1",
        "--finalized-after", "4", "--block-time", "0.2"]


def run(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENVELOPAY_DEVNET_HOME": str(home)}
    done = subprocess.run([*ENVELOPAY, *args], capture_output=True, text=True, timeout=120, env=env)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_detached_devnet_status_fund_down(tmp_path: Path) -> None:
    home = tmp_path / "devnet"
    assert run("devnet", "status", home=home, check=False).returncode == 3  # nothing runs: 3
    up = run("devnet", "up", "--detach", *FAST, home=home)
    try:  # a failed assertion still stops the devnet
        assert "solana  http://127.0.0.1:" in up.stdout and "devnet up in the background" in up.stdout
        state = json.loads((home / "devnet.json").read_text())
        again = run("devnet", "up", "--detach", *FAST, home=home, check=False)
        assert again.returncode == 3 and "already runs" in again.stderr  # the environment
        status = run("devnet", "status", home=home)
        assert "solana: ok slot" in status.stdout and "base: ok block" in status.stdout
        assert "garden: ok" in status.stdout
        wallet = str(Keypair().pubkey())
        funded = run("fund", wallet, "--sol", "2", "--usdc", "5", home=home)
        assert f"solana-local {wallet}: +2 SOL (2000000000 units), +5 USDC (5000000 units)" in funded.stdout
        bad = run("fund", wallet, "--usdc", "1.0000001", home=home, check=False)
        assert bad.returncode == 2 and "at most 6 decimals" in bad.stderr
    finally:
        down = run("devnet", "down", home=home, check=False)
    assert down.returncode == 0, down.stderr
    assert f"pid {state['pid']}" in down.stdout
    assert not (home / "devnet.json").exists()
    gone = run("fund", str(Keypair().pubkey()), "--sol", "1", home=home, check=False)
    assert gone.returncode == 3 and "no devnet is running" in gone.stderr  # the environment


def test_fund_says_the_environment_is_at_fault(tmp_path: Path) -> None:
    """A devnet whose process is gone, or whose node does not answer: exit 3 (README
    "Output and exit codes": the environment), not 2 (bad input)."""
    from datetime import UTC, datetime

    from typer.testing import CliRunner

    from envelopay.cli.app import app
    from envelopay.devnet.state import BaseEndpoint, DevnetState, SolanaEndpoint, write_state

    home = tmp_path / "devnet"
    home.mkdir()
    wallet = str(Keypair().pubkey())

    def state(pid: int) -> None:
        write_state(DevnetState(home=str(home), pid=pid, started=datetime.now(UTC).isoformat(),
                                solana=SolanaEndpoint("http://127.0.0.1:9/", 0.4, 2, 32),
                                base=BaseEndpoint("http://127.0.0.1:9/", "eth-tester", 1, 1.0,
                                                  "0x" + "00" * 20),
                                garden_socket=str(home / "garden.sock"), garden_root=str(home / "garden"),
                                agents_dir=str(home / "agents")))

    runner = CliRunner()
    state(os.getpid())  # "running", but nothing listens on the node's port
    res = runner.invoke(app, ["fund", wallet, "--sol", "1", "--home", str(home), "--json"])
    assert res.exit_code == 3, res.output
    assert "did not answer" in res.output
    gone = subprocess.Popen(["true"])
    gone.wait()
    state(gone.pid)  # its process ended without `devnet down`
    res = runner.invoke(app, ["fund", wallet, "--sol", "1", "--home", str(home), "--json"])
    assert res.exit_code == 3, res.output
    assert "not running" in res.output


def test_up_refuses_times_that_are_not_positive_seconds(tmp_path: Path) -> None:
    """NaN and inf compare False against 0: they are refused (exit 2) before anything
    starts, like 0 and negative times, and so is more than a day."""
    from typer.testing import CliRunner

    from envelopay.cli.app import app

    home = tmp_path / "devnet"
    try:  # --detach: code that let one through fails here instead of serving in the foreground
        for flag in ("--slot-time", "--block-time"):
            for value in ("nan", "inf", "-inf", "0", "-1", "86401"):
                res = CliRunner().invoke(app, ["devnet", "up", "--detach", "--home", str(home), *FAST,
                                               flag, value, "--json"])
                assert res.exit_code == 2, (flag, value, res.output)
                assert "must be positive seconds" in res.output
        assert not (home / "devnet.json").exists()
    finally:
        if (home / "devnet.json").exists():
            run("devnet", "down", home=home, check=False)
