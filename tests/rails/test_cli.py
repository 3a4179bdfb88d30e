"""`envelopay rails`, `envelopay verify` and `envelopay pay-onchain`: exit codes and JSON.

verify runs against the fixture node answers (respx); pay-onchain and verify run end to
end against a real JSON-RPC dev node over a LiteSVM chain, on a thread of its own."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from solders.keypair import Keypair
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.testing.node_faults import hangs_up_after
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.keys import write_keypair
from envelopay_solana.tx import ata

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "rpc" / "solana"
URL = "https://rpc.example.test/"
runner = CliRunner()


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def verify_args(case: dict[str, Any], *extra: str) -> list[str]:
    e = case["expectation"]
    return ["verify", "--chain", e["chain"], "--token", e["token"], "--amount", str(e["amount"]),
            "--to", e["recipient"], "--tx", case["signature"], *extra]


def serve(case: dict[str, Any]) -> respx.MockRouter:
    router = respx.mock(assert_all_called=False)

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(200, json={**case["responses"][body["method"]], "id": body["id"]})

    router.post(URL).mock(side_effect=answer)
    return router


def test_rails_lists_installed_rails_chains_and_assets() -> None:
    result = runner.invoke(app, ["rails", "--json"])
    assert result.exit_code == 0, result.output
    listing = {r["rail"]: r for r in json.loads(result.stdout)["rails"]}
    sol = listing["solana"]
    assert sol["distribution"] == "envelopay-solana"
    assert sol["chains"] == ["solana", "solana-devnet", "solana-local"]
    usdc = next(a for a in sol["assets"] if a["chain"] == "solana" and a["symbol"] == "USDC")
    assert usdc == {"chain": "solana", "symbol": "USDC", "decimals": 6,
                    "address": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v",
                    "program": "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"}
    text = runner.invoke(app, ["rails"])
    assert text.exit_code == 0 and "solana-devnet" in text.stdout and "PYUSD" in text.stdout


@pytest.mark.parametrize(("name", "code", "status", "reason"), [
    ("success_usdc", 0, "ok", None),
    ("wrong_mint", 1, "rejected", "token_mismatch"),
    ("failed", 1, "rejected", "tx_failed"),
    ("not_confirmed", 1, "pending", "not_final"),
    ("rpc_error", 1, "unavailable", "rpc_unavailable"),
])
def test_verify_prints_the_verdict_and_exits_by_status(
    name: str, code: int, status: str, reason: str | None
) -> None:
    case = fixture(name)
    with serve(case):
        result = runner.invoke(app, verify_args(case, "--rpc", URL))
    assert result.exit_code == code, result.output
    out = json.loads(result.stdout)
    assert (out["status"], out["reason"]) == (status, reason)
    assert (out["chain"], out["tx"]) == ("solana", case["signature"])
    if status == "ok":
        assert out["observed_amount"] == str(case["expectation"]["amount"]) and out["oops"] is None


def test_verify_at_least_and_env_rpc(monkeypatch: pytest.MonkeyPatch) -> None:
    case = fixture("success_usdc")
    case["expectation"]["amount"] = 1
    monkeypatch.setenv("ENVELOPAY_RPC_URL", URL)
    with serve(case):
        exact = runner.invoke(app, verify_args(case))
        loose = runner.invoke(app, verify_args(case, "--at-least"))
    assert exact.exit_code == 1 and json.loads(exact.stdout)["reason"] == "amount_mismatch"
    assert loose.exit_code == 0 and json.loads(loose.stdout)["observed_amount"] == "25000000"


@pytest.mark.parametrize(("extra", "message"), [
    (["--amount", "1.5"], "--amount"),
    (["--amount", "-3"], "--amount"),
    (["--chain", "dogecoin"], "no rail named"),
    (["--chain", "solana-marsnet"], "network"),
    (["--not-before", "2026-11-30T10:00:00"], "time zone"),
    (["--not-after", "yesterday"], "ISO 8601"),
    (["--commitment", "eventually"], "--commitment"),
])
def test_verify_usage_errors_exit_2(extra: list[str], message: str) -> None:
    case = fixture("success_usdc")
    result = runner.invoke(app, [*verify_args(case, "--rpc", URL), *extra])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_verify_without_rpc_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVELOPAY_RPC_URL", raising=False)
    result = runner.invoke(app, verify_args(fixture("success_usdc")))
    assert result.exit_code == 2 and "--rpc" in result.output


@pytest.fixture
def devnode() -> Iterator[tuple[LocalSolana, str]]:
    """A Solana JSON-RPC dev node on its own thread and event loop."""
    yield from _devnode(lambda handle: handle)


@pytest.fixture
def devnode_dropping_sends() -> Iterator[tuple[LocalSolana, str]]:
    """As `devnode`, but it drops the connection after taking each transaction."""
    yield from _devnode(hangs_up_after("sendTransaction"))


def _devnode(wrap: Any) -> Iterator[tuple[LocalSolana, str]]:
    chain = LocalSolana()
    loop = asyncio.new_event_loop()
    server = JsonRpcServer(wrap(solana_rpc_handler(chain)))
    ready = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30)
    yield chain, server.url
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)
    loop.close()


def test_pay_onchain_then_verify_end_to_end(devnode: tuple[LocalSolana, str], tmp_path: Path) -> None:
    chain, url = devnode
    payer = chain.new_wallet(sol=10**9, tokens={"USDC": 5_000_000})
    keyfile = write_keypair(payer, tmp_path / "payer.json")
    assert keyfile.stat().st_mode & 0o077 == 0
    merchant = str(Keypair().pubkey())
    args = ["--chain", "solana-local", "--token", "USDC", "--amount", "1250000", "--to", merchant]
    paid = runner.invoke(app, ["pay-onchain", *args, "--keypair", str(keyfile), "--rpc", url])
    assert paid.exit_code == 0, paid.output
    out = json.loads(paid.stdout)
    assert out["chain"] == "solana-local" and out["proof_key"] == out["proof"]["tx"]
    checked = runner.invoke(app, ["verify", *args, "--tx", out["proof"]["tx"], "--rpc", url,
                                  "--payer", str(payer.pubkey())])
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["payer"] == str(payer.pubkey())

    broke = runner.invoke(app, ["pay-onchain", *args[:4], "--amount", "999999999", "--to", merchant,
                                "--keypair", str(keyfile), "--rpc", url])
    assert broke.exit_code == 3, broke.output  # the environment: a wallet short of funds
    assert json.loads(broke.stdout)["error"] == "insufficient_funds"


def test_pay_onchain_usage_errors(tmp_path: Path) -> None:
    base = ["pay-onchain", "--chain", "solana-local", "--token", "SOL", "--amount", "5", "--to",
            str(Keypair().pubkey()), "--rpc", "http://127.0.0.1:9/"]
    missing = runner.invoke(app, [*base, "--keypair", str(tmp_path / "nope.json")])
    assert missing.exit_code == 2 and "keypair" in missing.output
    (tmp_path / "bad.json").write_text('{"not": "a key"}')
    bad = runner.invoke(app, [*base, "--keypair", str(tmp_path / "bad.json")])
    assert bad.exit_code == 2 and "JSON array" in bad.output


def test_pay_onchain_with_the_node_down_is_exit_3(tmp_path: Path) -> None:
    keyfile = write_keypair(Keypair(), tmp_path / "k.json")
    result = runner.invoke(app, ["pay-onchain", "--chain", "solana-local", "--token", "SOL", "--amount", "5",
                                 "--to", str(Keypair().pubkey()), "--keypair", str(keyfile),
                                 "--rpc", "http://127.0.0.1:9/"])
    assert result.exit_code == 3, result.output  # the environment: the RPC unreachable
    assert json.loads(result.stdout)["error"] == "rpc_unavailable"


@pytest.mark.parametrize(("chain", "token", "to"), [
    ("solana-local", "DAI", "11111111111111111111111111111111"),
    ("solana-local", "SOL", "not-a-wallet"),
])
def test_pay_onchain_caller_mistakes_exit_2(tmp_path: Path, chain: str, token: str, to: str) -> None:
    keyfile = write_keypair(Keypair(), tmp_path / "k.json")
    result = runner.invoke(app, ["pay-onchain", "--chain", chain, "--token", token, "--amount", "5",
                                 "--to", to, "--keypair", str(keyfile), "--rpc", "http://127.0.0.1:9/"])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output


def test_pay_onchain_whose_send_goes_unanswered_says_not_to_pay_again(
    devnode_dropping_sends: tuple[LocalSolana, str], tmp_path: Path
) -> None:
    # The node took the transaction and hung up: not a failed payment. Exit 3, and the
    # detail names the transaction and says not to pay again; the money moved once.
    chain, url = devnode_dropping_sends
    payer = chain.new_wallet(sol=10**9, tokens={"USDC": 5_000_000})
    keyfile = write_keypair(payer, tmp_path / "payer.json")
    merchant = Keypair().pubkey()
    paid = runner.invoke(app, ["pay-onchain", "--chain", "solana-local", "--token", "USDC",
                               "--amount", "1250000", "--to", str(merchant), "--keypair", str(keyfile),
                               "--rpc", url])
    assert paid.exit_code == 3, paid.output
    doc = json.loads(paid.stdout)
    assert doc["error"] == "not_final" and "do not pay again" in doc["detail"], doc
    asset = make_rail({"local_chain": chain}).asset("solana-local", "USDC")
    assert asset is not None
    assert chain.token_balance(ata(merchant, asset)) == 1_250_000
