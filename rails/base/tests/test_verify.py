"""The pure check: hand-built JSON-RPC documents, no chain, no network."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import envelopay_base
from envelopay.rails.interface import AssetInfo, Expectation, Reason
from envelopay_base.assets import USDC_BASE
from envelopay_base.fixtures import load_documents
from envelopay_base.verify import TRANSFER_TOPIC, canonical_tx_hash, check_payment, quantity

DOC = load_documents()["success_usdc"]
USDC = AssetInfo(chain="base", symbol="USDC", address=USDC_BASE, decimals=6)
ETH = AssetInfo(chain="base", symbol="ETH", address=None, decimals=18)
SELLER = DOC["expectation"]["recipient"]
PAYER = DOC["expected"]["payer"]


def run(rpc: dict[str, Any], *, asset: AssetInfo = USDC, chain_id: int = 8453, **want: Any) -> Any:
    expectation = Expectation(**{"chain": "base", "token": asset.symbol, "amount": 25_000_000,
                                 "recipient": SELLER, **want})
    return check_payment(
        tx_hash=rpc["eth_getTransactionByHash"]["hash"], tx=rpc["eth_getTransactionByHash"],
        receipt=rpc["eth_getTransactionReceipt"], block=rpc.get("eth_getBlockByHash"),
        head=int(rpc["eth_blockNumber"], 16), chain_id=chain_id, expected_chain_id=8453,
        expectation=expectation, asset=asset,
    )


def fresh() -> dict[str, Any]:
    return copy.deepcopy(DOC["rpc"])


def test_baseline_ok() -> None:
    verdict = run(fresh())
    assert verdict.ok and verdict.observed_amount == 25_000_000 and verdict.payer == PAYER


def test_nft_transfer_and_removed_logs_do_not_count() -> None:
    rpc = fresh()
    log = rpc["eth_getTransactionReceipt"]["logs"][0]
    nft = {**log, "topics": [*log["topics"], "0x" + "00" * 31 + "07"]}  # ERC-721: tokenId indexed
    rpc["eth_getTransactionReceipt"]["logs"] = [nft, {**log, "removed": True}]
    assert run(rpc).reason is Reason.TOKEN_MISMATCH


def test_short_log_data_is_ignored() -> None:
    rpc = fresh()
    log = rpc["eth_getTransactionReceipt"]["logs"][0]
    log["data"] = "0x" + "00" * 16
    assert run(rpc).reason is Reason.TOKEN_MISMATCH


def test_chain_binding() -> None:
    assert run(fresh(), chain_id=84532).reason is Reason.CHAIN_MISMATCH
    rpc = fresh()
    rpc["eth_getTransactionByHash"]["chainId"] = hex(1)  # signed for mainnet Ethereum
    assert run(rpc).reason is Reason.CHAIN_MISMATCH
    legacy = fresh()
    del legacy["eth_getTransactionByHash"]["chainId"]  # pre-EIP-155: the node's chain binds it
    assert run(legacy).ok


def test_missing_block_or_head_is_unavailable() -> None:
    rpc = fresh()
    rpc["eth_getBlockByHash"] = None
    assert run(rpc).status == "unavailable"
    rpc = fresh()
    rpc["eth_getBlockByHash"]["number"] = hex(1)
    assert run(rpc).status == "unavailable"


def test_receipt_without_status_is_unavailable_not_ok() -> None:
    rpc = fresh()
    del rpc["eth_getTransactionReceipt"]["status"]
    assert run(rpc).status == "unavailable"


def test_contract_creation_is_not_an_eth_payment() -> None:
    rpc = fresh()
    tx = rpc["eth_getTransactionByHash"]
    tx.update(to=None, input="0x", value=hex(25_000_000))
    rpc["eth_getTransactionReceipt"]["logs"] = []
    assert run(rpc, asset=ETH).reason is Reason.RECIPIENT_MISMATCH


def test_quantity() -> None:
    assert quantity("0x10", "f") == 16 and quantity(16, "f") == 16
    for bad in ("16", True, None, "0xzz", 1.5):
        with pytest.raises(ValueError):
            quantity(bad, "f")


def test_transfer_topic_is_keccak_of_the_signature() -> None:
    from eth_utils import keccak

    assert "0x" + keccak(text="Transfer(address,address,uint256)").hex() == TRANSFER_TOPIC


@given(st.binary(min_size=32, max_size=32), st.booleans(), st.booleans())
def test_proof_key_one_spelling(raw: bytes, upper: bool, prefix: bool) -> None:
    text = raw.hex().upper() if upper else raw.hex()
    assert canonical_tx_hash({"tx": ("0x" if prefix else "") + text}) == "0x" + raw.hex()


@given(st.one_of(st.text(max_size=80), st.integers(), st.none(), st.binary(max_size=40)))
def test_proof_key_never_crashes_on_junk(value: Any) -> None:
    try:
        key = canonical_tx_hash({"tx": value})
    except ValueError:
        return
    assert len(key) == 66 and key == key.lower()


def test_public_exports() -> None:
    assert envelopay_base.__all__ == ["BaseRail", "LocalChain", "make_rail"]


def test_committed_artifact_matches_the_source(tmp_path: Path) -> None:
    """The artifact the rail loads is what build.py makes from Token.vy today."""
    contracts = Path(__file__).resolve().parents[1] / "contracts"
    committed = json.loads((Path(envelopay_base.__file__).parent / "contracts" / "token.json").read_text())
    code = (f"import sys, json; sys.path.insert(0, {str(contracts)!r}); import build; "
            "a = build.build(); print(json.dumps({'abi': a['abi'], 'bytecode': a['bytecode']}))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         timeout=120)
    fresh_build = json.loads(out.stdout)
    assert fresh_build["bytecode"] == committed["bytecode"]
    assert fresh_build["abi"] == committed["abi"]


def test_absurd_block_time_is_unavailable() -> None:
    for stamp in (hex(10**30), hex(2**63)):
        rpc = fresh()
        rpc["eth_getBlockByHash"]["timestamp"] = stamp
        assert run(rpc).status == "unavailable"


def test_answers_straddling_a_reorg_are_pending() -> None:
    rpc = fresh()
    rpc["eth_getTransactionReceipt"]["blockHash"] = "0x" + "ee" * 32
    verdict = run(rpc)
    assert verdict.status == "pending" and "reorg" in verdict.detail


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=70)
    | st.sampled_from(["0x", "0x1", "0xzz", TRANSFER_TOPIC, SELLER, "0x" + "00" * 32]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_TX, _RECEIPT, _BLOCK = "eth_getTransactionByHash", "eth_getTransactionReceipt", "eth_getBlockByHash"
_fields = st.sampled_from([
    (_TX, "to"), (_TX, "value"), (_TX, "from"), (_TX, "blockNumber"), (_TX, "input"), (_TX, "chainId"),
    (_RECEIPT, "logs"), (_RECEIPT, "status"), (_BLOCK, "timestamp"), (_BLOCK, "number"),
])


@given(st.lists(st.tuples(_fields, _json), min_size=1, max_size=4), st.booleans())
def test_any_node_answer_gives_a_verdict_never_an_exception(edits: list[Any], native: bool) -> None:
    rpc = fresh()
    for (method, field), value in edits:
        rpc[method][field] = value
    verdict = run(rpc, asset=ETH if native else USDC)
    assert verdict.status in ("ok", "rejected", "pending", "unavailable")
