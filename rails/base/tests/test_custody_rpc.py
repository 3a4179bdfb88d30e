"""The enforcer's Base payer (custody) against the eth-tester dev node over JSON-RPC: a
broadcast the node takes but never answers is not a refusal (the Solana payer's rule)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from eth_account import Account

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.errors import TransportError
from envelopay.rails.custodial import SignedPayment
from envelopay.testing.node_faults import Handler, fails_first, hangs_up_after
from envelopay_base.custody import BasePayer
from envelopay_base.devnode import base_rpc_handler
from envelopay_base.local import LocalChain
from envelopay_base.rail import make_rail

TO = "0x" + "55" * 20


async def _broadcast_through(
    wrap: Callable[[Handler], Handler], act: Callable[[BasePayer, SignedPayment], Awaitable[Any]]
) -> int:
    """Sign 0.003 USDC to TO on a dev node whose handler `wrap` wraps, then `act` on the
    signed payment; what TO received."""
    chain = LocalChain(blocks_per_tx=1)
    owner = Account.create()
    chain.fund(owner.address, eth=10**19, usdc=10**9)
    async with JsonRpcServer(wrap(base_rpc_handler(chain))) as node:
        rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local",
                          "chain_id": chain.chain_id, "poll_interval": 0.01})
        payer = BasePayer(rail)
        await act(payer, await payer.prepare(bytes(owner.key), token="USDC", amount=3_000, recipient=TO))
        await rail.aclose()
    return chain.token_balance(TO)


async def test_a_broadcast_the_node_never_answers_is_not_a_refusal() -> None:
    # The enforcer keeps a payment whose broadcast raised TransportError as broadcast and
    # asks the chain; "failed" would end it, and the agent would pay again.
    async def unanswered(payer: BasePayer, payment: SignedPayment) -> None:
        with pytest.raises(TransportError):
            await payer.broadcast(payment)
        assert await payer.lookup(payment.tx_id) == "confirmed"  # what the enforcer asks next

    assert await _broadcast_through(hangs_up_after("eth_sendRawTransaction"), unanswered) == 3_000  # once


async def test_a_broadcast_the_node_refuses_is_classified() -> None:
    async def refused(payer: BasePayer, payment: SignedPayment) -> None:
        assert (await payer.broadcast(payment))[0] == "expired"

    refusing = fails_first("eth_sendRawTransaction", 1, code=-32000, message="nonce too low")
    assert await _broadcast_through(refusing, refused) == 0
