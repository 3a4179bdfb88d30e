"""Issue 29, item 13: every command naming a wallet, chain, token or amount has them
judged by the asset registry and the rail's address syntax before anything is sent or
paid. Before: `invoice --wallet` was not checked against --chain (an EVM address on
Solana, or `0xzz`, went out as a valid INVOICE); `offer` with an unknown --give-chain
mailed the peer a WHICH before failing; `accept` of an OFFER not in the ledger paid, then
failed to find a flow for the ACCEPT; 2**64 on Solana was "insufficient funds" (exit 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config

from .conftest import WORKER, World
from .test_outside_values import _written

runner = CliRunner()


def _wallets(world: World) -> tuple[str, str]:
    accept = {a.chain: a.wallet for a in load_config(world.wcfg).accept}
    return accept["solana-local"], accept["base-local"]


def _cases(sol: str, evm: str) -> list[tuple[list[str], str, str]]:
    give = ["--give-amount", "5", "--give-token", "USDC", "--give-chain", "solana-local", "--give-to", sol,
            "--want-amount", "5", "--want-token", "USDC", "--want-chain", "base-local"]
    return [
        (["invoice", WORKER, "--amount", "5", "--token", "USDC", "--chain", "solana-local", "--wallet", evm],
         "--wallet", "not an address on solana-local"),
        (["invoice", WORKER, "--amount", "5", "--token", "USDC", "--chain", "base-local", "--wallet", "0xzz"],
         "--wallet", "not an address on base-local"),
        (["invoice", WORKER, "--amount", "5", "--token", "DOGE", "--chain", "base-local", "--wallet", evm],
         "--token", "unknown token 'DOGE'"),
        (["invoice", WORKER, "--amount", "5", "--token", "DAI", "--chain", "ethereum", "--wallet", evm],
         "--chain", "no rail configured for 'ethereum'"),
        (["invoice", WORKER, "--amount", str(2**64), "--token", "USDC", "--chain", "solana-local",
          "--wallet", sol], "--amount", "more than one transfer"),
        (["offer", WORKER, *give[:5], "nochain", *give[6:]], "--give-chain", "no rail configured"),
        (["offer", WORKER, *give[:3], "DOGE", *give[4:]], "--give-token", "unknown token 'DOGE'"),
        (["offer", WORKER, *give[:7], "0xzz", *give[8:]], "--give-to", "not an address on solana-local"),
        (["offer", WORKER, *give, "--wallet", sol], "--wallet", "not an address on base-local"),
        (["offer", WORKER, *give[:13], "nochain", "--wallet", evm], "--want-chain", "no rail configured"),
        (["accept", WORKER, "--offer", "ofr_1", "--amount", "5", "--token", "USDC", "--chain", "base-local",
          "--wallet", sol], "--wallet", "not an address on base-local"),
        (["accept", WORKER, "--offer", "ofr_nope", "--amount", "5", "--token", "USDC",
          "--chain", "solana-local", "--wallet", sol], "--offer", "no OFFER 'ofr_nope'"),
        (["pay", WORKER, "--amount", str(2**64), "--token", "USDC", "--chain", "solana-local",
          "--wallet", sol], "--amount", "at most 18446744073709551615"),
        (["pay", WORKER, "--amount", "5", "--token", "USDC", "--chain", "base-local", "--wallet", sol],
         "--wallet", "not an address on base-local"),
    ]


@pytest.mark.parametrize("index", range(14))
def test_terms_are_judged_before_anything_is_sent_or_paid(world: World, index: int) -> None:
    args, field, words = _cases(*_wallets(world))[index]
    before = _written(world)
    res = runner.invoke(app, [*args, "-c", str(world.ccfg), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["field"]) == (2, field), doc
    assert words in doc["detail"] and ("nothing was sent" in doc["detail"] or "nothing was paid"
                                       in doc["detail"]), doc
    assert _written(world) == before  # no flow, no outbox row, no WHICH, no mail


def test_an_accepted_rail_our_rails_cannot_verify_is_a_config_error(world: World, tmp_path: Path) -> None:
    broken = tmp_path / "client"
    shutil.copytree(world.ccfg.parent, broken, ignore=shutil.ignore_patterns("*.sock", "var"))
    cfg = broken / "envelopay.toml"
    mine = next(a.wallet for a in load_config(cfg).accept if a.chain == "base-local")
    cfg.write_text(cfg.read_text().replace(f'wallet = "{mine}"', 'wallet = "0xzz"'))
    res = runner.invoke(app, ["which", WORKER, "-c", str(cfg), "--json"])
    doc = json.loads(res.stdout)
    assert (res.exit_code, doc["error"]) == (3, "config"), doc
    assert "accept.1.wallet" in doc["detail"] and "0xzz" in doc["detail"]
    assert not (broken / "var" / "garden").exists() or not any((broken / "var").rglob("new/*"))
