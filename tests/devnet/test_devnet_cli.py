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
    assert "solana  http://127.0.0.1:" in up.stdout and "devnet up in the background" in up.stdout
    try:
        state = json.loads((home / "devnet.json").read_text())
        again = run("devnet", "up", "--detach", *FAST, home=home, check=False)
        assert again.returncode == 3 and "already runs" in again.stderr  # the environment
        status = run("devnet", "status", home=home)
        assert "solana: ok slot" in status.stdout and "base: ok block" in status.stdout
        assert "garden: ok" in status.stdout
        wallet = str(Keypair().pubkey())
        funded = run("fund", wallet, "--sol", "2", "--usdc", "5", home=home)
        assert f"solana-local {wallet}: +2000000000 lamports, +5000000 USDC units" in funded.stdout
        bad = run("fund", wallet, "--usdc", "1.0000001", home=home, check=False)
        assert bad.returncode == 2 and "at most 6 decimals" in bad.stderr
    finally:
        down = run("devnet", "down", home=home, check=False)
    assert down.returncode == 0, down.stderr
    assert f"pid {state['pid']}" in down.stdout
    assert not (home / "devnet.json").exists()
    gone = run("fund", str(Keypair().pubkey()), "--sol", "1", home=home, check=False)
    assert gone.returncode == 3 and "no devnet is running" in gone.stderr  # the environment
