"""The enforcer's Solana payer (custody) against the dev node over JSON-RPC: what one
payment asks of the node, and a failing first lookup beside the send that is not the
send's failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from solders.keypair import Keypair

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.testing.node_faults import fails_first
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.tx import ata

Handler = Callable[[str, list[Any]], Any]


async def _pay_through(wrap: Callable[[Handler], Handler]) -> tuple[int, int]:
    """One custody payment of 0.4 USDC on a dev node whose handler `wrap` wraps: the
    node's HTTP requests after signing and after the broadcast."""
    chain = LocalSolana()
    wallet = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    to = Keypair().pubkey()
    async with JsonRpcServer(wrap(solana_rpc_handler(chain))) as node:
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url, "poll_interval": 0.01})
        payer = SolanaPayer(rail)
        payment = await payer.prepare(bytes(wallet), token="USDC", amount=400_000, recipient=str(to))
        signed = node.requests
        assert await payer.broadcast(payment) == ("sent", "")
        await rail.aclose()
    asset = payer.asset("USDC")
    assert asset is not None
    assert chain.token_balance(ata(to, asset)) == 400_000  # paid, once
    return signed, node.requests


async def test_a_custody_payment_is_two_round_trips_when_the_node_confirms_at_once() -> None:
    methods: list[str] = []

    def counting(handle: Handler) -> Handler:
        def counted(method: str, params: list[Any]) -> Any:
            methods.append(method)
            return handle(method, params)
        return counted

    # The balance checks with the blockhash, then the send with its first lookup.
    assert await _pay_through(counting) == (1, 2), methods
    assert methods[-2:] == ["sendTransaction", "getSignatureStatuses"]


async def test_a_failing_lookup_beside_the_send_is_not_the_sends_failure() -> None:
    # The transaction landed; only the lookup in the send's batch failed. The broadcast
    # neither raises (the enforcer would leave the payment to recovery, its PAY's email
    # waiting) nor reads as refused: the next lookup confirms it.
    lookups: list[str] = []
    await _pay_through(fails_first("getSignatureStatuses", 1, lookups))
    assert len(lookups) == 2
