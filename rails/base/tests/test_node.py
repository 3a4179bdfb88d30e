"""The Base rail's RPC backend against real JSON-RPC nodes: anvil, and the eth-tester node
(the fallback when anvil is not installed). Each test runs on both (`NODE_KINDS`).

Where timing is not the point the node mines a block per transaction and the test mines
on demand (`evm_mine`); the confirmation test runs the node on a short block time."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from eth_account import Account

from envelopay.errors import RailError
from envelopay.rails.interface import Expectation, Reason
from envelopay_base.assets import USDC_LOCAL
from envelopay_base.devchain import NodeKind
from envelopay_base.rail import BaseRail, erc20_transfer_data, make_rail
from envelopay_base.verify import TRANSFER_TOPIC

from .nodes import NODE_KINDS, RunningNode, base_node

pytestmark = pytest.mark.parametrize("kind", NODE_KINDS)


async def funded_rail(node: RunningNode, **options: Any) -> tuple[BaseRail, str]:
    payer = Account.create()
    await node.dev.fund(payer.address, eth=10**19, usdc=10**9)
    rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local", "chain_id": node.chain_id,
                      "keypair": bytes(payer.key), "poll_interval": 0.01, **options})
    return rail, payer.address.lower()


def usdc(amount: int, recipient: str, **kw: Any) -> Expectation:
    return Expectation(chain="base-local", token="USDC", amount=amount, recipient=recipient, **kw)


async def test_receipt_and_transfer_log(kind: NodeKind) -> None:
    async with base_node(kind) as node:
        rail, payer = await funded_rail(node)
        to = Account.create().address
        proof = await rail.pay(chain="base-local", token="USDC", amount=1_234_567, recipient=to)
        receipt = await node.dev.receipt(proof["tx"])
        assert receipt is not None and int(receipt["status"], 16) == 1
        [log] = receipt["logs"]
        assert log["address"].lower() == USDC_LOCAL.lower()
        assert log["topics"][0] == TRANSFER_TOPIC
        assert log["topics"][1][-40:] == payer[2:] and log["topics"][2][-40:] == to.lower()[2:]
        assert int(log["data"], 16) == 1_234_567
        assert (await rail.verify(proof, usdc(1_234_567, to))).status == "pending"  # 1 of 2
        await node.dev.mine(1)
        verdict = await rail.verify(proof, usdc(1_234_567, to, payer=payer))
        await rail.aclose()
        assert verdict.ok and verdict.payer == payer and verdict.extra["confirmations"] == 2
        assert await node.dev.token_balance(to) == 1_234_567


async def test_confirmations_follow_the_block_clock(kind: NodeKind) -> None:
    depth, block_time = 8, 0.2
    async with base_node(kind, block_time=block_time) as node:
        rail, _ = await funded_rail(node)
        to = Account.create().address
        # pay() returns once its transaction is in a block
        proof = await rail.pay(chain="base-local", token="USDC", amount=5, recipient=to)
        seen: list[int] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            verdict = await rail.verify(proof, usdc(5, to, confirmations=depth))
            if verdict.status != "pending":
                break
            seen.append(verdict.extra["confirmations"])
            assert loop.time() < deadline, f"stuck at {seen[-1]} confirmations"
            await asyncio.sleep(block_time / 4)
        await rail.aclose()
    assert verdict.ok and verdict.extra["confirmations"] >= depth
    # Depth grows one block at a time with the clock: seen below the target, never down.
    assert seen and seen[0] < depth - 1 and seen == sorted(seen) and max(seen) < depth
    assert len(set(seen)) >= 2


async def test_reverted_transfer_is_tx_failed(kind: NodeKind) -> None:
    async with base_node(kind) as node:
        poor = Account.create()
        await node.dev.fund(poor.address, eth=10**17)  # gas money, no USDC: the transfer reverts
        to = Account.create().address
        tx = {"type": 2, "chainId": node.chain_id, "nonce": 0, "maxFeePerGas": 10**10,
              "maxPriorityFeePerGas": 10**9, "to": USDC_LOCAL, "gas": 100_000, "value": 0,
              "data": erc20_transfer_data(to, 10)}
        tx_hash = await node.dev.send_raw(bytes(poor.sign_transaction(tx).raw_transaction))
        receipt = await node.dev.wait_receipt(tx_hash)
        assert int(receipt["status"], 16) == 0 and receipt["logs"] == []
        await node.dev.mine(2)
        rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local"})
        verdict = await rail.verify({"tx": tx_hash}, usdc(10, to))
        await rail.aclose()
    assert verdict.status == "rejected" and verdict.reason is Reason.TX_FAILED


async def test_wrong_chain_id_is_refused(kind: NodeKind) -> None:
    async with base_node(kind) as node:
        rail, _ = await funded_rail(node)
        to = Account.create().address
        proof = await rail.pay(chain="base-local", token="USDC", amount=7, recipient=to)
        await node.dev.mine(1)
        await rail.aclose()
        other = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local",
                           "chain_id": node.chain_id + 1})
        verdict = await other.verify(proof, usdc(7, to))
        await other.aclose()
        mainnet = make_rail({"backend": "rpc", "rpc_url": node.url})  # expects 8453
        on_mainnet = await mainnet.verify(proof, Expectation("base", "USDC", 7, to))
        await mainnet.aclose()
    assert verdict.status == "rejected" and verdict.reason is Reason.CHAIN_MISMATCH
    assert on_mainnet.status == "rejected" and on_mainnet.reason is Reason.CHAIN_MISMATCH


async def test_reorg_removes_a_payment_after_one_confirmation(kind: NodeKind) -> None:
    async with base_node(kind) as node:
        rail, _ = await funded_rail(node)
        to = Account.create().address
        before = await node.dev.snapshot()
        head = await node.dev.head()
        proof = await rail.pay(chain="base-local", token="USDC", amount=9, recipient=to)
        first = await rail.verify(proof, usdc(9, to))
        assert first.status == "pending" and first.extra["confirmations"] == 1
        assert await node.dev.revert(before)  # the block holding the payment is gone
        assert await node.dev.head() == head
        await node.dev.mine(2)  # the chain moves on without it
        after = await rail.verify(proof, usdc(9, to))
        await rail.aclose()
        assert await node.dev.token_balance(to) == 0
    assert after.status == "rejected" and after.reason is Reason.TX_NOT_FOUND


async def test_a_payment_asks_the_node_in_few_round_trips(kind: NodeKind) -> None:
    """What `pay()` asks of the node, counted as HTTP requests at the client: the reads that
    build the transaction (chain id, fees, ETH and token balances, nonce, gas) gathered as
    one JSON-RPC batch, the send, then the receipt alone, without the block that only
    verification reads. The polls are all there is beyond that."""
    import httpx

    async with base_node(kind) as node:
        requests: list[list[str]] = []

        async def count(request: httpx.Request) -> None:
            import json

            body = json.loads(request.content)
            requests.append([c["method"] for c in (body if isinstance(body, list) else [body])])

        client = httpx.AsyncClient(event_hooks={"request": [count]})
        rail, _ = await funded_rail(node, http_client=client, chain_id=None)
        to = Account.create().address
        proof = await rail.pay(chain="base-local", token="USDC", amount=5_000, recipient=to)
        await client.aclose()
        await rail.aclose()
        prepared = ["eth_chainId", "eth_getBlockByNumber", "eth_maxPriorityFeePerGas", "eth_getBalance",
                    "eth_getTransactionCount", "eth_call", "eth_estimateGas"]
        assert sorted(requests[0]) == sorted(prepared), requests
        assert requests[1] == ["eth_sendRawTransaction"]
        assert requests[2:] and all(r == ["eth_getTransactionReceipt"] for r in requests[2:]), requests
        receipt = await node.dev.receipt(proof["tx"])
        assert receipt is not None and int(receipt["status"], 16) == 1
        assert await node.dev.token_balance(to) == 5_000


async def test_short_funds_are_the_answer_though_the_node_refuses_the_estimate(kind: NodeKind) -> None:
    """The gas estimate rides in the same batch as the balances; for a sender with too few
    tokens, or no ETH for gas, the node refuses to estimate. The payer hears that it is
    short of funds (not that the node failed), and nothing is sent."""
    async with base_node(kind) as node:
        to = Account.create().address
        for eth, usdc_held in ((10**19, 10), (0, 10**9)):
            payer = Account.create()
            await node.dev.fund(payer.address, eth=eth, usdc=usdc_held)
            rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local",
                              "chain_id": node.chain_id, "keypair": bytes(payer.key), "poll_interval": 0.01})
            with pytest.raises(RailError) as info:
                await rail.pay(chain="base-local", token="USDC", amount=1_000, recipient=to)
            await rail.aclose()
            assert info.value.reason == Reason.INSUFFICIENT_FUNDS.value, (eth, usdc_held, info.value)
            assert await node.dev.rpc("eth_getTransactionCount", [payer.address, "pending"]) == "0x0"
        assert await node.dev.token_balance(to) == 0
