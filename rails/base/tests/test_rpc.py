"""The JSON-RPC backend against the fixture documents in fixtures/rpc/base (served by respx)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx
from eth_utils import keccak

from envelopay.errors import RailError
from envelopay.rails.interface import Expectation, Reason
from envelopay.testing.node_faults import fails_first, hangs_up_after
from envelopay_base.fixtures import expectation_of, load_documents, rpc_answer
from envelopay_base.rail import make_rail

URL = "https://base-node.invalid/rpc"
DOCS = load_documents()


def serve(router: respx.MockRouter, doc: dict[str, Any], seen: list[Any] | None = None) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if seen is not None:
            seen.append(body)
        status, payload = rpc_answer(doc, body)
        return httpx.Response(status, json=payload)

    router.post(URL).mock(side_effect=answer)


def test_fixture_set_covers_the_issue_cases() -> None:
    wanted = {"success_eth", "success_usdc", "reverted", "wrong_token", "wrong_recipient",
              "several_transfers", "not_found", "not_enough_confirmations", "wrong_chain_id", "rpc_error"}
    assert wanted <= set(DOCS)


@pytest.mark.parametrize("name", sorted(DOCS))
async def test_fixture_verdict(name: str) -> None:
    doc = DOCS[name]
    rail = make_rail({"backend": "rpc", "rpc_url": URL, "network": doc["network"]})
    with respx.mock(assert_all_called=False) as router:
        serve(router, doc)
        verdict = await rail.verify(doc["proof"], expectation_of(doc))
    await rail.aclose()
    expected = doc["expected"]
    assert verdict.status == expected["status"], verdict
    assert (verdict.reason.value if verdict.reason else None) == expected["reason"], verdict
    if "observed_amount" in expected:
        assert verdict.observed_amount == int(expected["observed_amount"])
    if "payer" in expected:
        assert verdict.payer == expected["payer"]
    if verdict.ok:
        assert verdict.proof_key == rail.proof_key(doc["proof"])
        assert verdict.tx_time is not None and verdict.tx_time.year == 2025


async def test_one_batch_then_block_cached_by_hash() -> None:
    doc = DOCS["success_usdc"]
    rail = make_rail({"rpc_url": URL})
    seen: list[Any] = []
    with respx.mock as router:
        serve(router, doc, seen)
        first = await rail.verify(doc["proof"], expectation_of(doc))
        assert len(seen) == 2  # the batch, then the block
        assert [c["method"] for c in seen[0]] == [
            "eth_chainId", "eth_blockNumber", "eth_getTransactionByHash", "eth_getTransactionReceipt"]
        assert seen[1]["method"] == "eth_getBlockByHash"
        second = await rail.verify(doc["proof"], expectation_of(doc))
        assert len(seen) == 3  # block came from the cache
    await rail.aclose()
    assert first.ok and second.ok and first.tx_time == second.tx_time


async def test_connection_refused_is_unavailable() -> None:
    doc = DOCS["success_usdc"]
    rail = make_rail({"rpc_url": URL})
    with respx.mock as router:
        router.post(URL).mock(side_effect=httpx.ConnectError("connection refused"))
        verdict = await rail.verify(doc["proof"], expectation_of(doc))
    await rail.aclose()
    assert verdict.status == "unavailable" and verdict.reason is Reason.RPC_UNAVAILABLE
    assert "ConnectError" in verdict.detail


async def test_non_json_and_malformed_answers_are_unavailable() -> None:
    doc = DOCS["success_usdc"]
    rail = make_rail({"rpc_url": URL})
    with respx.mock as router:
        router.post(URL).mock(return_value=httpx.Response(200, text="<html>gateway</html>"))
        assert (await rail.verify(doc["proof"], expectation_of(doc))).status == "unavailable"
    broken = json.loads(json.dumps(doc))
    broken["rpc"]["eth_getTransactionReceipt"]["status"] = "yes"
    with respx.mock as router:
        serve(router, broken)
        verdict = await rail.verify(doc["proof"], expectation_of(doc))
    await rail.aclose()
    assert verdict.status == "unavailable" and "malformed" in verdict.detail


async def test_node_answering_for_another_transaction_is_not_trusted() -> None:
    doc = json.loads(json.dumps(DOCS["success_usdc"]))
    doc["rpc"]["eth_getTransactionByHash"]["hash"] = DOCS["success_eth"]["proof"]["tx"]
    rail = make_rail({"rpc_url": URL})
    with respx.mock as router:
        serve(router, doc)
        verdict = await rail.verify(doc["proof"], expectation_of(doc))
    await rail.aclose()
    assert verdict.status == "unavailable"


async def test_mainnet_rail_refuses_sepolia_expectation_without_asking() -> None:
    doc = DOCS["sepolia_usdc"]
    rail = make_rail({"rpc_url": URL})  # mainnet by default
    with respx.mock as router:
        route = router.post(URL)
        verdict = await rail.verify(doc["proof"], expectation_of(doc))
        assert not route.called
    await rail.aclose()
    assert verdict.reason is Reason.CHAIN_MISMATCH


async def test_rpc_on_local_network_binds_to_the_dev_node_chain_id() -> None:
    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_base.devnode import base_rpc_handler
    from envelopay_base.local import LocalChain

    chain = LocalChain()
    payer, key = chain.new_wallet()
    chain.fund(payer, eth=10**18, usdc=1_000)
    to, _ = chain.new_wallet()
    async with JsonRpcServer(base_rpc_handler(chain)) as node:
        rail = make_rail({"rpc_url": node.url, "network": "local", "keypair": key.encode()})
        assert rail.chains == ("base-local",) and rail.chain_id is None
        proof = await rail.pay(chain="base-local", token="USDC", amount=250, recipient=to)
        assert rail.chain_id == chain.chain_id
        verdict = await rail.verify(proof, Expectation("base-local", "USDC", 250, to))
        await rail.aclose()
    assert verdict.ok and verdict.payer == payer.lower()
    pinned = make_rail({"backend": "rpc", "rpc_url": URL, "network": "local", "chain_id": 31337})
    assert pinned.chain_id == 31337


async def test_pay_over_rpc_signs_a_usdc_transfer(tmp_path: Any) -> None:
    from eth_account import Account

    key = "0x" + "11" * 32  # an obviously-test key
    sender = Account.from_key(key).address.lower()
    key_file = tmp_path / "base.key"
    key_file.write_text(key + "\n")
    seller = DOCS["success_usdc"]["expectation"]["recipient"]
    sent: list[str] = []
    state = {
        "eth_getBlockByNumber": {"number": "0x16e3606", "baseFeePerGas": "0x403d50"},
        "eth_maxPriorityFeePerGas": "0xf4240",
        "eth_getBalance": hex(10**16),
        "eth_call": "0x" + f"{50_000_000:064x}",
        "eth_getTransactionCount": "0x7",
        "eth_estimateGas": "0xb01c",
        "eth_chainId": "0x2105",
        "eth_blockNumber": "0x16e3606",
        "eth_getTransactionByHash": None,
        "eth_getTransactionReceipt": {"blockNumber": "0x16e3606", "blockHash": "0x" + "cd" * 32,
                                      "status": "0x1"},
        "eth_getBlockByHash": {"hash": "0x" + "cd" * 32, "number": "0x16e3606", "timestamp": "0x692b8a00"},
    }

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        calls = body if isinstance(body, list) else [body]
        out = []
        for call in calls:
            if call["method"] == "eth_sendRawTransaction":
                sent.append(call["params"][0])
                result: Any = "0x" + keccak(bytes.fromhex(call["params"][0][2:])).hex()  # as nodes answer
            else:
                result = state[call["method"]]
            out.append({"jsonrpc": "2.0", "id": call["id"], "result": result})
        return httpx.Response(200, json=out if isinstance(body, list) else out[0])

    rail = make_rail({"rpc_url": URL, "keypair": str(key_file)})
    with respx.mock as router:
        router.post(URL).mock(side_effect=answer)
        proof = await rail.pay(chain="base", token="USDC", amount=25_000_000, recipient=seller)
        assert proof == {"tx": "0x" + keccak(bytes.fromhex(sent[0][2:])).hex()}
        state["eth_call"] = "0x" + f"{1:064x}"
        with pytest.raises(RailError) as info:
            await rail.pay(chain="base", token="USDC", amount=25_000_000, recipient=seller)
        assert info.value.reason == "insufficient_funds"
        state["eth_call"] = "0x" + f"{50_000_000:064x}"
        state["eth_getTransactionReceipt"] = {**state["eth_getTransactionReceipt"], "status": "0x0"}
        with pytest.raises(RailError) as info:  # mined, but reverted
            await rail.pay(chain="base", token="USDC", amount=25_000_000, recipient=seller)
        assert info.value.reason == "tx_failed"
        state["eth_getTransactionReceipt"] = None
        impatient = make_rail({"rpc_url": URL, "keypair": str(key_file), "confirm_timeout": 0.05,
                               "poll_interval": 0.01})
        with pytest.raises(RailError) as info:  # never mined within the timeout
            await impatient.pay(chain="base", token="USDC", amount=25_000_000, recipient=seller)
        assert info.value.reason == "not_final"
        await impatient.aclose()
        no_wait = make_rail({"rpc_url": URL, "keypair": str(key_file), "confirm_timeout": 0})
        sent_at_once = await no_wait.pay(chain="base", token="USDC", amount=1, recipient=seller)
        assert sent_at_once == {"tx": "0x" + keccak(bytes.fromhex(sent[-1][2:])).hex()}
        await no_wait.aclose()
    await rail.aclose()
    assert len(sent) == 4
    tx = Account.recover_transaction(sent[0])
    assert tx.lower() == sender
    from eth_account.typed_transactions import TypedTransaction
    from hexbytes import HexBytes

    decoded = TypedTransaction.from_bytes(HexBytes(sent[0])).as_dict()
    assert decoded["chainId"] == 8453 and decoded["nonce"] == 7
    assert decoded["to"].hex().lower().removeprefix("0x") == "833589fcd6edb6e08f4c7c32d4f71b54bda02913"
    assert decoded["data"].hex().removeprefix("0x") == (
        "a9059cbb" + seller[2:].rjust(64, "0") + f"{25_000_000:064x}")
    assert decoded["maxFeePerGas"] == 2 * 0x403D50 + 0xF4240


async def test_pay_unreachable_node_is_a_rail_error(tmp_path: Any) -> None:
    key_file = tmp_path / "k"
    key_file.write_text("22" * 32)
    rail = make_rail({"rpc_url": URL, "keypair": str(key_file)})
    with respx.mock as router:
        router.post(URL).mock(side_effect=httpx.ConnectError("down"))
        with pytest.raises(RailError) as info:
            await rail.pay(chain="base", token="ETH", amount=1, recipient="0x" + "33" * 20)
    await rail.aclose()
    assert info.value.reason == Reason.RPC_UNAVAILABLE.value


def test_expectation_type_is_the_core_one() -> None:
    assert isinstance(expectation_of(DOCS["success_eth"]), Expectation)


def serve_many(router: respx.MockRouter, docs: list[dict[str, Any]], posts: list[Any]) -> None:
    """One node knowing several fixture transactions: each call answered from its document."""
    by_hash = {d["proof"]["tx"].lower(): d for d in docs}

    def pick(call: dict[str, Any]) -> dict[str, Any]:
        params = call.get("params") or []
        key = str(params[0]).lower() if params else ""
        for doc in docs:  # block lookups go by block hash
            block = doc["rpc"].get("eth_getBlockByHash")
            if block and block["hash"] == key:
                return doc
        return by_hash.get(key, docs[0])

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        posts.append(body)
        calls = body if isinstance(body, list) else [body]
        out = [rpc_answer(pick(c), c)[1] for c in calls]
        return httpx.Response(200, json=out if isinstance(body, list) else out[0])

    router.post(URL).mock(side_effect=answer)


async def test_concurrent_verifications_share_batched_requests() -> None:
    import asyncio

    good, missing, reverted = DOCS["success_usdc"], DOCS["not_found"], DOCS["reverted"]
    jobs = [good, missing, reverted] * 10
    rail = make_rail({"rpc_url": URL})
    posts: list[Any] = []
    with respx.mock as router:
        serve_many(router, [good, missing, reverted], posts)
        verdicts = await asyncio.gather(*(rail.verify(d["proof"], expectation_of(d)) for d in jobs))
    await rail.aclose()
    # per-call answers stay with their own verification inside a shared batch
    assert [v.status for v in verdicts] == ["ok", "rejected", "rejected"] * 10
    assert [v.reason for v in verdicts[:3]] == [None, Reason.TX_NOT_FOUND, Reason.TX_FAILED]
    # 120 reads in batches of at most 100 calls, then the blocks: 4 requests, not 50
    assert len(posts) <= 4
    first = posts[0]
    assert len(first) <= 100
    assert sum(1 for c in first if c["method"] == "eth_chainId") == 1  # shared parameterless read
    calls = [c for p in posts if isinstance(p, list) for c in p]
    lookups = [c for c in calls if c["method"] == "eth_getTransactionByHash"]
    assert len(lookups) == 30


async def test_batch_max_splits_requests() -> None:
    import asyncio

    doc = DOCS["success_eth"]
    rail = make_rail({"rpc_url": URL, "rpc_batch_max": 4})
    posts: list[Any] = []
    with respx.mock as router:
        serve_many(router, [doc], posts)
        verdicts = await asyncio.gather(*(rail.verify(doc["proof"], expectation_of(doc)) for _ in range(5)))
    await rail.aclose()
    assert all(v.ok for v in verdicts)
    assert all(len(p) <= 4 for p in posts if isinstance(p, list))
    assert len(posts) >= 5


async def _pay_on_a_dev_node(wrap: Any, **options: Any) -> tuple[Any, Any]:
    """One USDC payment on the eth-tester node whose handler `wrap` wraps: (pay()'s proof
    or the RailError it raised, the chain)."""
    from eth_account import Account

    from envelopay.devnet.rpc_server import JsonRpcServer
    from envelopay_base.devnode import base_rpc_handler
    from envelopay_base.local import LocalChain

    chain = LocalChain(blocks_per_tx=1)
    payer = Account.create()
    chain.fund(payer.address, eth=10**19, usdc=10**9)
    async with JsonRpcServer(wrap(base_rpc_handler(chain))) as node:
        rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local",
                          "chain_id": chain.chain_id, "keypair": bytes(payer.key), "poll_interval": 0.01,
                          **options})
        try:
            got: Any = await rail.pay(chain="base-local", token="USDC", amount=7_000,
                                      recipient="0x" + "44" * 20)
        except RailError as exc:
            got = exc
        await rail.aclose()
    return got, chain


async def test_receipt_errors_after_the_send_are_asked_again() -> None:
    # The transaction is out: a failing look at its receipt is asked again, not reported
    # as a failed payment (the payer would pay twice).
    looks: list[str] = []
    proof, chain = await _pay_on_a_dev_node(fails_first("eth_getTransactionReceipt", 2, looks, code=-32000,
                                                        message="header not found"))
    assert isinstance(proof, dict), proof
    assert len(looks) == 3
    assert chain.token_balance("0x" + "44" * 20) == 7_000


async def test_a_send_the_node_never_answers_names_the_transaction_that_may_land() -> None:
    got, chain = await _pay_on_a_dev_node(hangs_up_after("eth_sendRawTransaction"))
    assert isinstance(got, RailError) and got.reason == "not_final" and got.sent is not None, got
    assert chain.token_balance("0x" + "44" * 20) == 7_000  # it did move, once
    assert chain.read(got.sent["tx"]).receipt is not None


async def test_a_payment_not_mined_in_time_names_its_transaction() -> None:
    def unseen(handle: Any) -> Any:
        def never(method: str, params: list[Any]) -> Any:
            return None if method == "eth_getTransactionReceipt" else handle(method, params)
        return never

    got, chain = await _pay_on_a_dev_node(unseen, confirm_timeout=0.05)
    assert isinstance(got, RailError) and got.reason == "not_final" and got.sent is not None, got
    assert chain.read(got.sent["tx"]).receipt is not None


async def test_a_transaction_the_node_refuses_is_not_one_that_may_land() -> None:
    got, chain = await _pay_on_a_dev_node(fails_first("eth_sendRawTransaction", 1, code=-32000,
                                                      message="replacement transaction underpriced"))
    assert isinstance(got, RailError) and got.reason == "rpc_unavailable" and got.sent is None, got
    assert chain.token_balance("0x" + "44" * 20) == 0
