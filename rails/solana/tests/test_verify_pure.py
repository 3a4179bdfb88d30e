"""The pure check over jsonParsed documents: the rules one by one, on variations of the
fixture documents, and robustness (any mangled document gives a Verdict, never an
exception)."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envelopay.rails.interface import Expectation, Reason, Verdict
from envelopay_solana.assets import ASSETS, TOKEN_PROGRAM
from envelopay_solana.rail import canonical_signature
from envelopay_solana.verify import associated_token_address, check_transaction, extract_transfers

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "rpc" / "solana"


def case(name: str) -> tuple[dict[str, Any], Expectation, str]:
    doc = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc["responses"]["getTransaction"]["result"], Expectation(**doc["expectation"]), doc["signature"]


def asset(symbol: str) -> Any:
    return next(a for a in ASSETS if a.chain == "solana" and a.symbol == symbol)


def check(doc: dict[str, Any], exp: Expectation, sig: str, confirmation: str = "finalized") -> Verdict:
    return check_transaction(doc, exp, asset(exp.token), signature=sig, confirmation=confirmation)


def token_ix(doc: dict[str, Any]) -> dict[str, Any]:
    return next(ix for ix in doc["transaction"]["message"]["instructions"]
                if ix.get("parsed", {}).get("type") in ("transfer", "transferChecked")
                and ix["programId"] != "1" * 32)


def balance_of(doc: dict[str, Any], address: str, field: str = "postTokenBalances") -> dict[str, Any]:
    keys = [k["pubkey"] for k in doc["transaction"]["message"]["accountKeys"]]
    return next(b for b in doc["meta"][field] if keys[b["accountIndex"]] == address)


def test_commitment_order() -> None:
    doc, exp, sig = case("success_usdc")
    assert check(doc, exp, sig, "processed").status == "pending"
    assert check(doc, exp, sig, "confirmed").ok
    strict = Expectation(exp.chain, exp.token, exp.amount, exp.recipient, commitment="finalized")
    assert check(doc, strict, sig, "confirmed").status == "pending"
    assert check(doc, strict, sig, "finalized").ok


def test_two_matching_transfers_are_summed() -> None:
    doc, exp, sig = case("success_usdc")
    ix = token_ix(doc)
    doc["transaction"]["message"]["instructions"].append(copy.deepcopy(ix))
    dest = ix["parsed"]["info"]["destination"]
    post = balance_of(doc, dest)
    post["uiTokenAmount"]["amount"] = str(int(post["uiTokenAmount"]["amount"]) + exp.amount)
    assert check(doc, exp, sig).reason == Reason.AMOUNT_MISMATCH
    double = Expectation(exp.chain, exp.token, 2 * exp.amount, exp.recipient)
    v = check(doc, double, sig)
    assert v.ok and v.observed_amount == 2 * exp.amount


def test_token_2022_fee_withheld_caps_the_credit() -> None:
    doc, exp, sig = case("token2022")
    dest = token_ix(doc)["parsed"]["info"]["destination"]
    post = balance_of(doc, dest)
    post["uiTokenAmount"]["amount"] = str(int(post["uiTokenAmount"]["amount"]) - 75_000)  # 1% fee withheld
    v = check(doc, exp, sig)
    assert v.reason == Reason.AMOUNT_MISMATCH and "7425000" in v.detail
    assert v.observed_amount == 7_425_000 and v.to_json()["observed_amount"] == "7425000"  # not null


def test_transfer_checked_with_fee_credits_the_amount_less_the_fee() -> None:
    doc, exp, sig = case("token2022")
    ix = token_ix(doc)
    ix["parsed"]["type"] = "transferCheckedWithFee"
    ix["parsed"]["info"]["feeAmount"] = {"amount": "75000", "decimals": 6, "uiAmountString": "0.075"}
    post = balance_of(doc, ix["parsed"]["info"]["destination"])
    post["uiTokenAmount"]["amount"] = str(int(post["uiTokenAmount"]["amount"]) - 75_000)
    net = Expectation(exp.chain, exp.token, exp.amount - 75_000, exp.recipient)
    assert check(doc, net, sig).ok
    assert check(doc, exp, sig).reason == Reason.AMOUNT_MISMATCH
    ix["parsed"]["info"]["feeAmount"] = {"amount": str(exp.amount + 1)}  # nonsense fee: not a transfer
    assert not check(doc, net, sig).ok


def test_token_account_owned_by_recipient_counts_and_a_stranger_account_does_not() -> None:
    doc, exp, sig = case("success_usdc")
    dest = token_ix(doc)["parsed"]["info"]["destination"]
    assert dest == associated_token_address(exp.recipient, asset("USDC").address, TOKEN_PROGRAM)
    assert check(doc, exp, sig).ok
    balance_of(doc, dest)["owner"] = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
    for bal in doc["meta"]["preTokenBalances"]:
        if bal["owner"] == exp.recipient:
            bal["owner"] = "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"
    assert check(doc, exp, sig).reason == Reason.RECIPIENT_MISMATCH


def test_without_token_balances_the_ata_is_derived() -> None:
    doc, exp, sig = case("success_usdc")
    doc["meta"]["preTokenBalances"] = []
    doc["meta"]["postTokenBalances"] = []
    v = check(doc, exp, sig)  # transferChecked carries the mint; the destination is the derived ATA
    assert v.ok and v.observed_amount == exp.amount
    other = Expectation(exp.chain, exp.token, exp.amount, "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin")
    assert check(doc, other, sig).reason == Reason.RECIPIENT_MISMATCH


def test_multisig_authority_binds_the_payer() -> None:
    doc, exp, sig = case("success_usdc")
    info = token_ix(doc)["parsed"]["info"]
    owner = info.pop("authority")
    info["multisigAuthority"] = owner
    info["signers"] = ["9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"]
    bound = Expectation(exp.chain, exp.token, exp.amount, exp.recipient, payer=owner)
    assert check(doc, bound, sig).ok
    signer = Expectation(exp.chain, exp.token, exp.amount, exp.recipient, payer=info["signers"][0])
    assert check(doc, signer, sig).reason == Reason.PAYER_MISMATCH


def test_missing_block_time_is_stale_only_with_a_window() -> None:
    doc, exp, sig = case("success_sol")
    when = datetime.fromtimestamp(doc["blockTime"], tz=UTC)
    windowed = Expectation(exp.chain, exp.token, exp.amount, exp.recipient,
                           not_before=when - timedelta(hours=1), not_after=when + timedelta(hours=1))
    assert check(doc, windowed, sig).ok
    doc["blockTime"] = None
    assert check(doc, exp, sig).ok
    assert check(doc, windowed, sig).reason == Reason.STALE


def test_sol_transfer_inside_an_inner_instruction() -> None:
    doc, exp, sig = case("success_sol")
    message = doc["transaction"]["message"]
    moved = message["instructions"]
    message["instructions"] = [{"programId": "JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4", "accounts": [],
                                "data": "", "stackHeight": None}]
    doc["meta"]["innerInstructions"] = [{"index": 0, "instructions": [dict(moved[0], stackHeight=2)]}]
    assert check(doc, exp, sig).ok


def test_no_transfer_at_all() -> None:
    doc, exp, sig = case("success_sol")
    doc["transaction"]["message"]["instructions"] = []
    assert check(doc, exp, sig).reason == Reason.RECIPIENT_MISMATCH


def test_transfers_are_extracted_from_both_levels() -> None:
    doc, _, _ = case("inner_instruction")
    kinds = sorted((t.program[:5], t.amount) for t in extract_transfers(doc))
    assert kinds == [("Token", 25_000_000)]


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


BASE_DOCS = {name: case(name) for name in ("success_usdc", "token2022", "inner_instruction", "success_sol")}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(BASE_DOCS)),
       picks=st.lists(st.integers(min_value=0), min_size=1, max_size=4),
       junk=st.lists(JSON, min_size=4, max_size=4))
def test_any_mangled_document_gives_a_verdict(name: str, picks: list[int], junk: list[Any]) -> None:
    doc, exp, sig = copy.deepcopy(BASE_DOCS[name])
    for pick, value in zip(picks, junk, strict=False):
        paths = [p for p in _paths(doc) if p]
        path = paths[pick % len(paths)]
        target = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
    verdict = check(doc, exp, sig)
    assert isinstance(verdict, Verdict)
    assert verdict.status in ("ok", "rejected", "pending", "unavailable")
    if verdict.ok:
        assert verdict.observed_amount is not None and verdict.observed_amount >= 0


SIG = canonical_signature({"tx": case("success_usdc")[2]})




@pytest.mark.parametrize("form", ["base58", "padded", "hex", "0xHEX", "base64"])
def test_proof_key_spellings(form: str) -> None:
    from solders.signature import Signature

    raw = bytes(Signature.from_string(SIG))
    spelling = {"base58": SIG, "padded": f"\t{SIG} ", "hex": raw.hex(), "0xHEX": "0x" + raw.hex().upper(),
                "base64": base64.b64encode(raw).decode()}[form]
    assert canonical_signature({"tx": spelling}) == SIG


@given(st.text(max_size=130))
def test_proof_key_is_canonical_or_value_error(text: str) -> None:
    try:
        key = canonical_signature({"tx": text})
    except ValueError:
        return
    assert canonical_signature({"tx": key}) == key
    assert len(key) in (87, 88)


def test_absurd_block_time_is_no_block_time() -> None:
    # Found by the mangled-document property: datetime.fromtimestamp raises OSError /
    # OverflowError on such values; the check must answer a verdict instead.
    doc, exp, sig = case("success_usdc")
    for stamp in (67_768_036_191_676_800, 10**30, -(10**20)):
        mangled = copy.deepcopy(doc)
        mangled["blockTime"] = stamp
        assert check(mangled, exp, sig).ok  # no window asked: the time is not needed
        windowed = Expectation(exp.chain, exp.token, exp.amount, exp.recipient,
                               not_before=datetime(2020, 1, 1, tzinfo=UTC))
        verdict = check(mangled, windowed, sig)
        assert (verdict.status, verdict.reason) == ("rejected", Reason.STALE)
