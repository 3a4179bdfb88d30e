"""The RPC backend against realistic node answers (fixtures/rpc/solana/*.json), via respx.

Each fixture names the rule it exercises, the JSON-RPC answers, and the verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from envelopay.rails.interface import Expectation
from envelopay_solana import make_rail

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "rpc" / "solana"
CASES = sorted(p.stem for p in FIXTURES.glob("*.json"))
URL = "https://rpc.example.test/"


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def mount(router: respx.MockRouter, responses: dict[str, Any], calls: list[dict[str, Any]]) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls.append(body)
        canned = responses.get(body["method"])
        if canned is None:
            return httpx.Response(200, json={"jsonrpc": "2.0", "id": body["id"],
                                             "error": {"code": -32601, "message": "Method not found"}})
        if "http_status" in canned:
            return httpx.Response(canned["http_status"], text="upstream unavailable")
        return httpx.Response(200, json={**canned, "id": body["id"]})

    router.post(URL).mock(side_effect=answer)


def test_every_rule_has_a_fixture() -> None:
    assert {"success_sol", "success_usdc", "failed", "wrong_mint", "wrong_recipient", "inner_instruction",
            "token2022", "not_found", "not_confirmed", "rpc_error"} <= set(CASES)


@pytest.mark.parametrize("name", CASES)
async def test_fixture_verdict(name: str) -> None:
    case = load(name)
    calls: list[dict[str, Any]] = []
    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    with respx.mock(assert_all_called=False) as router:
        mount(router, case["responses"], calls)
        verdict = await rail.verify({"tx": case["signature"]}, Expectation(**case["expectation"]))
    await rail.aclose()
    assert (verdict.status, verdict.reason.value if verdict.reason else None) == (
        case["expected"]["status"], case["expected"]["reason"]), verdict.detail
    # The request shape a node expects: jsonParsed, v0 transactions, the wanted commitment.
    first = calls[0]
    assert first["method"] == "getTransaction" and first["params"][0] == case["signature"]
    assert first["params"][1] == {"encoding": "jsonParsed", "maxSupportedTransactionVersion": 0,
                                  "commitment": "confirmed"}
    if verdict.ok:
        assert verdict.observed_amount == case["expectation"]["amount"]
        assert verdict.proof_key == case["signature"]
        assert verdict.tx_time is not None


async def test_finalized_commitment_is_requested_and_pending_until_reached() -> None:
    case = load("success_usdc")
    doc = case["responses"]["getSignatureStatuses"]
    confirmed = json.loads(json.dumps(doc).replace('"finalized"', '"confirmed"'))
    calls: list[dict[str, Any]] = []
    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    with respx.mock(assert_all_called=False) as router:
        mount(router, {"getTransaction": {"jsonrpc": "2.0", "result": None},
                       "getSignatureStatuses": confirmed}, calls)
        exp = Expectation(**case["expectation"], commitment="finalized")
        verdict = await rail.verify({"tx": case["signature"]}, exp)
    await rail.aclose()
    assert verdict.status == "pending" and "confirmed" in verdict.detail
    assert calls[0]["params"][1]["commitment"] == "finalized"


async def test_payer_binding_and_at_least_on_fixture() -> None:
    case = load("success_usdc")
    tx = case["responses"]["getTransaction"]["result"]
    authority = next(ix["parsed"]["info"]["authority"] for ix in tx["transaction"]["message"]["instructions"]
                     if ix.get("parsed", {}).get("type") == "transferChecked")
    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    with respx.mock(assert_all_called=False) as router:
        mount(router, case["responses"], [])
        good = await rail.verify({"tx": case["signature"]},
                                 Expectation(**case["expectation"], payer=authority))
        bad = await rail.verify({"tx": case["signature"]},
                                Expectation(**case["expectation"], payer=case["expectation"]["recipient"]))
        less = await rail.verify({"tx": case["signature"]}, Expectation(
            **{**case["expectation"], "amount": 1}, amount_policy="at_least"))
    await rail.aclose()
    assert good.ok and good.payer == authority
    assert bad.reason is not None and bad.reason.value == "payer_mismatch"
    assert less.ok and less.observed_amount == case["expectation"]["amount"]


async def test_a_node_answering_another_transaction_is_not_trusted() -> None:
    case = load("success_usdc")
    other = load("success_sol")
    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    with respx.mock(assert_all_called=False) as router:
        mount(router, other["responses"], [])
        verdict = await rail.verify({"tx": case["signature"]}, Expectation(**case["expectation"]))
    await rail.aclose()
    assert verdict.status == "unavailable"


async def test_garbage_answers_are_unavailable_not_exceptions() -> None:
    case = load("success_usdc")
    rail = make_rail({"backend": "rpc", "rpc_url": URL})
    for body in (b"<html>oops</html>", b"[]", b'{"jsonrpc": "2.0", "id": 1}', b'{"result": "text"}'):
        with respx.mock() as router:
            router.post(URL).mock(return_value=httpx.Response(200, content=body))
            verdict = await rail.verify({"tx": case["signature"]}, Expectation(**case["expectation"]))
        assert verdict.status == "unavailable", body
    await rail.aclose()
