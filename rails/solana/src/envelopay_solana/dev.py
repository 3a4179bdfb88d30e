"""This distribution's dev chain (entry point group ``envelopay.devchains``, name ``solana``).

`DEV_CHAIN.start` serves LiteSVM over JSON-RPC on loopback on a `SlotClock` (the
devnet's Solana node); `fund` is its faucet; `local` opens an in-process chain for the
demo. See `envelopay.devnet.plugins` for the contract.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from solders.pubkey import Pubkey
from spl.token.instructions import get_associated_token_address

from envelopay.devnet.plugins import LocalWallet
from envelopay.devnet.rpc_server import JsonRpcServer, ServedChain
from envelopay.errors import TransportError
from envelopay_solana.assets import LOCAL_USDC_MINT
from envelopay_solana.devnode import (
    CONFIRMED_AFTER,
    FINALIZED_AFTER,
    SLOT_TIME,
    SlotClock,
    solana_rpc_handler,
)
from envelopay_solana.local import LocalSolana

__all__ = ["DEV_CHAIN", "SolanaDevChain", "SolanaLocalWorld"]


@dataclass
class SolanaLocalWorld:
    """An in-process `LocalSolana` behind the `LocalWorld` contract."""

    sol: LocalSolana = field(default_factory=LocalSolana)
    chain: str = "solana-local"

    def new_wallet(self, *, native: int = 0, usdc: int = 0) -> LocalWallet:
        kp = self.sol.new_wallet(sol=native, tokens={"USDC": usdc} if usdc else None)
        return LocalWallet(str(kp.pubkey()), bytes(kp))

    def fund(self, address: str, *, native: int = 0, usdc: int = 0) -> None:
        if native:
            self.sol.airdrop(Pubkey.from_string(address), native)
        if usdc:
            self.sol.mint_tokens(Pubkey.from_string(address), "USDC", usdc)

    def usdc_balance(self, address: str) -> int | None:
        ata = get_associated_token_address(Pubkey.from_string(address), Pubkey.from_string(LOCAL_USDC_MINT))
        return self.sol.token_balance(ata)

    def rail_options(self, key: bytes | None = None) -> dict[str, Any]:
        # The demo's chain finalizes at once: a short poll keeps a payment quick.
        options: dict[str, Any] = {"local_chain": self.sol, "poll_interval": 0.01}
        return options if key is None else {**options, "keypair": key}


class SolanaDevChain:
    async def start(self, options: Mapping[str, Any]) -> ServedChain:
        """Options: ``port``, ``slot_time``, ``confirmed_after``, ``finalized_after``."""
        clock = SlotClock(LocalSolana(), slot_time=options.get("slot_time", SLOT_TIME),
                          confirmed_after=options.get("confirmed_after", CONFIRMED_AFTER),
                          finalized_after=options.get("finalized_after", FINALIZED_AFTER))
        server = JsonRpcServer(solana_rpc_handler(clock.chain, clock), port=options.get("port", 0))
        url = await server.start()
        return ServedChain(url, server, asyncio.create_task(clock.run()))

    async def fund(self, rpc_url: str, wallet: str, *, native: int, usdc: int) -> None:
        async with httpx.AsyncClient(timeout=10.0) as client:
            if native:
                await _call(client, rpc_url, "requestAirdrop", [wallet, native])
            if usdc:
                await _call(client, rpc_url, "envelopay_mintTokens", [wallet, "USDC", usdc])

    def local(self) -> SolanaLocalWorld:
        return SolanaLocalWorld()


async def _call(client: httpx.AsyncClient, url: str, method: str, params: list[object]) -> object:
    try:
        ask = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        doc = (await client.post(url, json=ask)).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise TransportError(f"the devnet's Solana node at {url} did not answer: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("error"):
        raise TransportError(f"{method} refused: {doc.get('error') if isinstance(doc, dict) else doc}")
    return doc.get("result")


DEV_CHAIN = SolanaDevChain()
