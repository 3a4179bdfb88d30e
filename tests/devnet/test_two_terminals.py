"""README "Two terminals", run as written: each command a separate process, against
`envelopay devnet` with its default (real) timing — a Solana slot every 0.4 s, a Base
block every 2 s — and a paid ORDER→INVOICE→PAY→FULFILL on Solana, then on Base.

Two substitutions only: `make devnet` is the command it runs after installing
(`envelopay devnet up --detach`), and `.venv/bin/envelopay` is this interpreter's
`python -m envelopay.cli`. Ports are left to the system ($ENVELOPAY_DEVNET_*_PORT=0) and
the devnet's home is the test's own, so concurrent runs do not meet.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from envelopay.mail.garden_auth import authenticated_sender

README = Path(__file__).resolve().parents[2] / "README.md"
ENVELOPAY = [sys.executable, "-m", "envelopay.cli"]


def readme_commands() -> list[list[str]]:
    text = README.read_text()
    block = text.split("<!-- two-terminals -->", 1)[1].split("<!-- /two-terminals -->", 1)[0]
    lines = [line for line in block.strip().strip("`").splitlines() if line.strip() and line.strip() != "sh"]
    out = []
    for line in lines:
        argv = shlex.split(line, comments=True)
        if argv == ["make", "devnet"]:
            argv = [".venv/bin/envelopay", "devnet", "up", "--detach"]
        assert argv[0] == ".venv/bin/envelopay", line
        out.append([*ENVELOPAY, *argv[1:]])
    return out


def test_readme_has_five_commands() -> None:
    commands = readme_commands()
    assert len(commands) == 5
    assert commands[2][len(ENVELOPAY):len(ENVELOPAY) + 2] == ["worker", "serve"]


def test_two_terminals(tmp_path: Path) -> None:
    env = {**os.environ, "ENVELOPAY_DEVNET_HOME": str(tmp_path / "devnet"),
           "ENVELOPAY_DEVNET_SOLANA_PORT": "0", "ENVELOPAY_DEVNET_BASE_PORT": "0"}
    env.pop("ENVELOPAY_CONFIG", None)
    up, init_worker, serve, init_buyer, order = readme_commands()

    def run(argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
        return done

    worker = None
    try:  # from `up` on: a failed assertion still stops the devnet it started
        started = run(up)
        assert "base    http://127.0.0.1:" in started.stdout and "anvil" in started.stdout
        run(init_worker)
        with (tmp_path / "worker.log").open("w") as log:  # terminal 1
            worker = subprocess.Popen(serve, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
        run(init_buyer)
        solana = run(order)
        # The INVOICE is progress (stderr, the CLI's output contract); the FULFILL is the answer.
        assert "received INVOICE" in solana.stderr and "received FULFILL" in solana.stdout, solana.stdout
        assert "solana-local: final" in solana.stderr, solana.stderr  # it waited for its own payment
        task = order.index("--task") + 1
        on_base = list(order)
        on_base[task] = json.dumps({**json.loads(order[task]), "rail": "base-local/USDC"})
        base = run(on_base)
        assert "received FULFILL" in base.stdout, base.stdout + base.stderr
        assert "base-local: final (" in base.stderr, base.stderr
        fulfilled = json.loads(base.stdout[base.stdout.index("\n{\n") + 1:])  # the answer, as printed
        assert fulfilled["type"] == "fulfill" and fulfilled["result"] == {"characters": 13, "words": 2}
        # The same with --json: one document; what was paid names the INVOICE's wallet.
        from envelopay.config import load_config

        doc = json.loads(run([*order, "--json"]).stdout)
        wallets = {a.chain: a.wallet for a in load_config(tmp_path / "worker" / "envelopay.toml").accept}
        assert doc["exit"] == 0 and doc["answer"]["type"] == "fulfill", doc
        assert doc["paid"]["chain"] == "solana-local" and doc["paid"]["to"] == wallets["solana-local"], doc
        # The devnet's garden authenticated every sender and says so in its own trace header.
        for who, sender in (("worker", "buyer"), ("buyer", "worker")):
            box = tmp_path / "devnet" / "garden" / f"{who}@garden.local"
            seen = {authenticated_sender(p.read_bytes(), authserv_id="garden.local")
                    for p in box.glob("*/*") if p.is_file()}
            assert seen == {f"{sender}@garden.local"}, (who, seen)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=30)
        subprocess.run([*ENVELOPAY, "devnet", "down"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert not (tmp_path / "devnet" / "devnet.json").exists()
