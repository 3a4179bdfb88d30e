"""The enforcer's Solana payer (custody) against the dev node over JSON-RPC: what one
payment asks of the node, and a failing first lookup beside the send that is not the
send's failure."""

from __future__ import annotations

from typing import Any

from solders.keypair import Keypair

from envelopay.devnet.rpc_server import JsonRpcFault, JsonRpcServer
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.devnode import solana_rpc_handler
from envelopay_solana.tx import ata


def _payer_on(node: JsonRpcServer) -> SolanaPayer:
    rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": node.url, "poll_interval": 0.01})
    return SolanaPayer(rail)


async def test_a_custody_payment_is_two_round_trips_when_the_node_confirms_at_once() -> None:
    chain = LocalSolana()
    wallet = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    handle = solana_rpc_handler(chain)
    methods: list[str] = []

    def counted(method: str, params: list[Any]) -> Any:
        methods.append(method)
        return handle(method, params)

    to = Keypair().pubkey()
    async with JsonRpcServer(counted) as node:
        payer = _payer_on(node)
        payment = await payer.prepare(bytes(wallet), token="USDC", amount=400_000, recipient=str(to))
        assert node.requests == 1, methods  # the balance checks with the blockhash
        assert await payer.broadcast(payment) == ("sent", "")
        assert node.requests == 2, methods  # the send with its first lookup
        await payer.rail.aclose()
    assert methods[-2:] == ["sendTransaction", "getSignatureStatuses"]
    asset = payer.asset("USDC")
    assert asset is not None
    assert chain.token_balance(ata(to, asset)) == 400_000


async def test_a_failing_lookup_beside_the_send_is_not_the_sends_failure() -> None:
    # The transaction landed; only the lookup in the send's batch failed. The broadcast
    # neither raises (the enforcer would leave the payment to recovery, its PAY's email
    # waiting) nor reads as refused: the next lookup confirms it.
    chain = LocalSolana()
    wallet = chain.new_wallet(sol=10**10, tokens={"USDC": 10**9})
    handle = solana_rpc_handler(chain)
    lookups: list[str] = []

    def flaky(method: str, params: list[Any]) -> Any:
        if method == "getSignatureStatuses":
            lookups.append(method)
            if len(lookups) == 1:
                raise JsonRpcFault(-32005, "node is behind")
        return handle(method, params)

    to = Keypair().pubkey()
    async with JsonRpcServer(flaky) as node:
        payer = _payer_on(node)
        payment = await payer.prepare(bytes(wallet), token="USDC", amount=400_000, recipient=str(to))
        assert await payer.broadcast(payment) == ("sent", "")
        await payer.rail.aclose()
    assert len(lookups) == 2
    asset = payer.asset("USDC")
    assert asset is not None
    assert chain.token_balance(ata(to, asset)) == 400_000
