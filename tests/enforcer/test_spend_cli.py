"""The spend enforcer's operator CLI against a real `envelopay enforcer serve` process that
pays over a Solana JSON-RPC dev node running in this test (both see one chain)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from solders.keypair import Keypair

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.local import LocalSolana

from .test_cli import _free_port, cli, smtp  # noqa: F401  # the SMTP sink fixture

CHAIN = "solana-local"


@pytest.fixture
def devnode() -> Iterator[tuple[LocalSolana, str]]:
    chain = LocalSolana()
    loop = asyncio.new_event_loop()
    server = JsonRpcServer(solana_rpc_handler(chain))
    url = loop.run_until_complete(server.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield chain, url
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    loop.close()


@pytest.fixture
def paying(tmp_path: Path, smtp: Any, devnode: tuple[LocalSolana, str]) -> Iterator[tuple[str, Path]]:  # noqa: F811
    port = _free_port()
    token_file = tmp_path / "op.token"
    vault = tmp_path / "vault.key"
    vault.write_text("a-vault-secret-for-the-cli-test-0123456789\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "envelopay.cli",
            "enforcer",
            "serve",
            "--db",
            f"sqlite:///{tmp_path}/e.db",
            "--port",
            str(port),
            "--operator-token-file",
            str(token_file),
            "--smtp-host",
            "127.0.0.1",
            "--smtp-port",
            str(smtp[1]),
            "--smtp-security",
            "none",
            "--vault-key-file",
            str(vault),
            "--pay-rail",
            f"{CHAIN}={devnode[1]}",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "enforcer listening on" in line:
                break
        else:
            raise AssertionError(f"enforcer did not start (exit {proc.wait()})")
        yield f"http://127.0.0.1:{port}", token_file
    finally:
        proc.terminate()
        code = proc.wait(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
        assert code == 0


def _pay(url: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(f"{url}/v1/pay", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert r.status_code == 200
    data: dict[str, Any] = r.json()
    return data


def test_spend_cli_end_to_end(
    paying: tuple[str, Path], devnode: tuple[LocalSolana, str], tmp_path: Path
) -> None:
    url, token_file = paying
    chain, _ = devnode
    common = ["--enforcer", url, "--operator-token-file", str(token_file)]
    outputs: list[str] = []

    r = cli(
        "agent",
        "create",
        "buyer",
        "--address",
        "buyer@agents.test",
        "--allow",
        "partner.test",
        "--wallet",
        f"{CHAIN}=new",
        "--spend",
        f"{CHAIN}/USDC=5000000/day,1000000/payment",
        "--payee",
        "partner.test",
        "--require-invoice",
        *common,
    )
    outputs.append(r.output)
    assert r.exit_code == 0, r.output
    address = re.search(rf"wallet {CHAIN} (\S+) \(default\)", r.output)
    token = re.search(r"ENVELOPAY_AGENT_TOKEN=(\S+)", r.output)
    assert address and token, r.output
    assert f"{CHAIN}/USDC=5000000/day,1000000/payment" in r.output and "require_invoice  yes" in r.output
    chain.airdrop(address.group(1), 10**9)
    chain.mint_tokens(address.group(1), "USDC", 10_000_000)

    r = cli("agent", "policy", "show", "buyer", "--json", *common)
    assert r.exit_code == 0 and json.loads(r.output)["limits"][f"{CHAIN}/USDC"] == {
        "per_payment": 1_000_000,
        "daily": 5_000_000,
    }
    to = str(Keypair().pubkey())
    pay = {
        "to": "seller@partner.test",
        "chain": CHAIN,
        "token": "USDC",
        "amount": "500000",
        "wallet": to,
        "idempotency_key": "cli-1",
    }
    assert _pay(url, token.group(1), pay)["code"] == "invoice_required"
    r = cli(
        "agent",
        "policy",
        "set",
        "buyer",
        "--no-require-invoice",
        "--spend",
        f"{CHAIN}/USDC=2000000/payment",
        *common,
    )
    outputs.append(r.output)
    assert r.exit_code == 0 and "require_invoice  no" in r.output
    assert f"{CHAIN}/USDC=2000000/payment" in r.output  # the window given replaces that asset's limit
    d = _pay(url, token.group(1), {**pay, "idempotency_key": "cli-2"})
    assert d["status"] == "paid_and_sent" and d["tx_id"]
    held = _pay(url, token.group(1), {**pay, "to": "eve@stranger.test", "idempotency_key": "cli-3"})
    assert held["status"] == "pending_approval"

    r = cli("agent", "balances", "buyer", *common)
    outputs.append(r.output)
    assert r.exit_code == 0 and "9.5 USDC (9500000)" in r.output and address.group(1) in r.output
    r = cli("approvals", "list", *common)
    outputs.append(r.output)
    assert r.exit_code == 0 and held["id"] in r.output and "pay 0.5 USDC" in r.output
    r = cli("approvals", "approve", held["id"], *common)
    assert r.exit_code == 0 and "SENT" in r.output, r.output

    key = Keypair()
    key_file = tmp_path / "imported.json"
    key_file.write_text(json.dumps(list(bytes(key))))
    r = cli(
        "agent",
        "wallet",
        "add",
        "buyer",
        "--chain",
        CHAIN,
        "--import",
        str(key_file),
        "--label",
        "imp",
        *common,
    )
    outputs.append(r.output)
    assert r.exit_code == 0 and str(key.pubkey()) in r.output
    r = cli("agent", "wallet", "list", "buyer", *common)
    outputs.append(r.output)
    assert r.output.count(CHAIN) == 2

    for bad in (
        ["agent", "policy", "set", "buyer", "--spend", "solana/USDC=lots"],
        ["agent", "create", "x", "--address", "x@agents.test", "--wallet", "solana-local"],
        ["agent", "wallet", "add", "buyer", "--chain", "mars-local"],
    ):
        r = cli(*bad, *common)
        outputs.append(r.output)
        assert r.exit_code == 2, (bad, r.output)
    r = cli("agent", "balances", "nobody", *common)
    assert r.exit_code == 2 and "no agent" in r.output
    everything = "\n".join(outputs)
    assert bytes(key).hex() not in everything and json.dumps(list(bytes(key))) not in everything


def test_a_greylisted_pay_is_delivered_by_the_running_enforcer(
    paying: tuple[str, Path], devnode: tuple[LocalSolana, str], smtp: Any  # noqa: F811
) -> None:
    """The payee's server answers 451 (greylisting) when the money moves: the call says
    `paid`, not sent. Nobody asks again; the serving enforcer delivers the PAY once the
    server takes it (its finisher: 20 s after the call, then every 5 s, backing off)."""
    url, token_file = paying
    chain, _ = devnode
    keep = smtp[0]
    common = ["--enforcer", url, "--operator-token-file", str(token_file)]
    r = cli("agent", "create", "grey", "--address", "grey@agents.test", "--allow", "partner.test",
            "--wallet", f"{CHAIN}=new", "--spend", f"{CHAIN}/USDC=5000000/day,1000000/payment",
            "--payee", "partner.test", *common)
    assert r.exit_code == 0, r.output
    address = re.search(rf"wallet {CHAIN} (\S+) \(default\)", r.output)
    token = re.search(r"ENVELOPAY_AGENT_TOKEN=(\S+)", r.output)
    assert address and token, r.output
    chain.airdrop(address.group(1), 10**9)
    chain.mint_tokens(address.group(1), "USDC", 10_000_000)
    keep.refuse = "451 4.7.1 greylisted, try again later"
    d = _pay(url, token.group(1), {"to": "seller@partner.test", "chain": CHAIN, "token": "USDC",
                                   "amount": "500000", "wallet": str(Keypair().pubkey()),
                                   "idempotency_key": "grey-1"})
    assert d["state"] == "paid" and d["tx_id"] and keep.messages == [], d
    keep.refuse = ""
    for _ in range(450):  # taken 20 s after the call made it (its call may still be at work)
        if keep.messages:
            break
        time.sleep(0.1)
    [raw] = keep.messages
    assert d["tx_id"].encode() in raw
    r = httpx.get(f"{url}/v1/payments/{d['id']}", headers={"Authorization": f"Bearer {token.group(1)}"})
    assert r.status_code == 200 and r.json()["status"] == "paid_and_sent", r.text
    time.sleep(0.5)
    assert len(keep.messages) == 1
