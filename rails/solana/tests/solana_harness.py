"""RailHarness implementations for the Solana rail: LiteSVM directly, and the RPC
backend against a JSON-RPC dev node serving the same LiteSVM chain."""

from __future__ import annotations

import base64
import socket
from typing import Any

from solders.keypair import Keypair
from solders.pubkey import Pubkey
from solders.signature import Signature

from envelopay.rails.interface import Rail
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana import tx as txb
from envelopay_solana.rail import SolanaRail

AMOUNTS = {"SOL": 5_000_000, "USDC": 2_500_000, "PYUSD": 1_000_000}


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


class SolanaHarness:
    native = "SOL"
    tokens = ("USDC", "PYUSD")

    def __init__(self, chain: LocalSolana, rail: SolanaRail, payer: Keypair) -> None:
        self.local = chain
        self._rail = rail
        self.payer_kp = payer

    @classmethod
    def local_backend(cls, chain: LocalSolana | None = None) -> SolanaHarness:
        chain = chain or LocalSolana()
        payer = chain.new_wallet(sol=50 * 10**9, tokens={"USDC": 10**12, "PYUSD": 10**12})
        rail = make_rail({"local_chain": chain, "keypair": bytes(payer)})
        return cls(chain, rail, payer)

    @property
    def rail(self) -> Rail:
        return self._rail

    @property
    def chain(self) -> str:
        return "solana-local"

    @property
    def payer(self) -> str:
        return str(self.payer_kp.pubkey())

    def amount(self, token: str) -> int:
        return AMOUNTS[token]

    def new_wallet(self) -> str:
        return str(Keypair().pubkey())

    def _asset(self, token: str) -> Any:
        asset = self._rail.asset(self.chain, token)
        assert asset is not None
        return asset

    async def failed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        # A poor payer with fees covered: the transfer itself fails on chain (meta.err set).
        poor = self.local.new_wallet(sol=10**7, tokens={t: 1 for t in self.tokens})
        asset = self._asset(token)
        spend = 10**12 if asset.native else amount
        ixs = txb.payment_instructions(poor.pubkey(), Pubkey.from_string(recipient), asset, spend,
                                       create_ata=not asset.native)
        result = self.local.send(txb.sign(ixs, poor, self.local.latest_blockhash()))
        assert not result.ok, "the harness's failed payment must fail"
        return {"tx": result.signature}

    async def unconfirmed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        asset = self._asset(token)
        ixs = txb.payment_instructions(self.payer_kp.pubkey(), Pubkey.from_string(recipient), asset, amount,
                                       create_ata=not asset.native)
        result = self.local.send(txb.sign(ixs, self.payer_kp, self.local.latest_blockhash()),
                                 commitment="processed")
        assert result.ok
        return {"tx": result.signature}

    async def make_final(self, proof: dict[str, Any]) -> None:
        self.local.set_commitment(proof["tx"], "finalized")

    def unknown_proof(self) -> dict[str, Any]:
        return {"tx": str(Keypair().sign_message(b"never sent"))}

    def malformed_proofs(self) -> list[dict[str, Any]]:
        sig = bytes(Keypair().sign_message(b"x"))
        return [
            {"tx": str(Signature.default())[:40]},          # too short
            {"tx": "0" * 88},                               # '0' is not base58
            {"tx": "l" * 87},                               # 'l' is not base58
            {"tx": sig[:32].hex()},                         # 32 bytes of hex
            {"tx": base64.b64encode(sig[:60]).decode()},    # 60 bytes of base64
            {"tx": "1" * 200},
        ]

    def proof_spellings(self, proof: dict[str, Any]) -> list[dict[str, Any]]:
        raw = bytes(Signature.from_string(proof["tx"]))
        return [{"tx": f"  {proof['tx']}\n"}, {"tx": raw.hex()}, {"tx": "0x" + raw.hex().upper()},
                {"tx": base64.b64encode(raw).decode()}]

    def unavailable_rail(self) -> Rail:
        return make_rail({"backend": "rpc", "network": "local", "rpc_url": closed_port_url()})


class RpcSolanaHarness(SolanaHarness):
    """The same checks through the RPC backend, against the dev node over one LiteSVM chain."""

    @classmethod
    def over(cls, chain: LocalSolana, url: str) -> RpcSolanaHarness:
        payer = chain.new_wallet(sol=50 * 10**9, tokens={"USDC": 10**12, "PYUSD": 10**12})
        rail = make_rail({"backend": "rpc", "network": "local", "rpc_url": url, "keypair": bytes(payer),
                          "poll_interval": 0.01})
        return cls(chain, rail, payer)
