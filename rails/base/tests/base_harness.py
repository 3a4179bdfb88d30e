"""RailHarness implementations for the Base rail: eth-tester directly, the RPC backend
against a JSON-RPC dev node serving the same eth-tester chain over loopback HTTP, and
`NodeHarness` over any dev node (anvil or eth-tester) driven only through JSON-RPC."""

from __future__ import annotations

import os
import socket
from typing import Any

from eth_account import Account

from envelopay.rails.interface import AssetInfo, Expectation, Rail, Verdict
from envelopay_base.assets import USDC_LOCAL
from envelopay_base.devchain import DevChain
from envelopay_base.local import LocalChain
from envelopay_base.rail import BaseRail, erc20_transfer_data, make_rail

from .nodes import RunningNode

AMOUNTS = {"ETH": 10**15, "USDC": 2_500_000}


def closed_port_url() -> str:
    """A loopback URL nothing listens on (the port was free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def reverting_payment(
    chain_id: int, token_contract: str, token: str, amount: int, recipient: str
) -> dict[str, Any]:
    """An unsigned type-2 transaction that reverts: the USDC transfer from a wallet with gas
    money but no tokens; ETH cannot fail into a plain account, so the native case sends
    value to the token contract, which has no payable fallback."""
    tx: dict[str, Any] = {"type": 2, "chainId": chain_id, "nonce": 0, "maxFeePerGas": 10**10,
                          "maxPriorityFeePerGas": 10**9, "to": token_contract, "gas": 100_000}
    if token == "ETH":
        tx.update(value=amount, data=b"")
    else:
        tx.update(value=0, data=erc20_transfer_data(recipient, amount))
    return tx


class _OnBaseLocal:
    """What both harnesses say alike: the chain, the assets and amounts, the payer."""

    native = "ETH"
    tokens = ("USDC",)
    _rail: Rail
    _payer: str

    @property
    def rail(self) -> Rail:
        return self._rail

    @property
    def chain(self) -> str:
        return "base-local"

    @property
    def payer(self) -> str:
        return self._payer

    def amount(self, token: str) -> int:
        return AMOUNTS[token]


class BaseHarness(_OnBaseLocal):
    def __init__(self, chain: LocalChain, rail: BaseRail, payer: str) -> None:
        self.local = chain
        self._rail = rail
        self._payer = payer.lower()

    @staticmethod
    def _funded_key(chain: LocalChain) -> tuple[str, str]:
        address, key = chain.new_wallet()
        chain.fund(address, eth=10**20, usdc=10**13)
        return address, key

    @classmethod
    def local_backend(cls, chain: LocalChain | None = None) -> BaseHarness:
        chain = chain or LocalChain()
        address, key = cls._funded_key(chain)
        return cls(chain, make_rail({"local_chain": chain, "keypair": key.encode()}), address)

    @classmethod
    def rpc_backend(cls, chain: LocalChain, url: str) -> BaseHarness:
        address, key = cls._funded_key(chain)
        rail = make_rail({"backend": "rpc", "rpc_url": url, "network": "local", "chain_id": chain.chain_id,
                          "keypair": key.encode()})
        return cls(chain, rail, address)

    def new_wallet(self) -> str:
        return self.local.new_wallet()[0]

    async def failed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        poor, key = self.local.new_wallet()
        self.local.fund(poor, eth=10**17)
        tx = reverting_payment(self.local.chain_id, self.local.token_address, token, amount, recipient)
        tx_hash = self.local.submit(bytes(Account.sign_transaction(tx, key).raw_transaction))
        receipt = self.local.tester.get_transaction_receipt(tx_hash)
        assert receipt["status"] == 0, "the harness's failed payment must revert"
        return {"tx": tx_hash}

    async def unconfirmed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        depth = self.local.blocks_per_tx
        self.local.blocks_per_tx = 1  # only the transaction's own block: 1 of 2 confirmations
        try:
            return await self._rail.pay(chain=self.chain, token=token, amount=amount, recipient=recipient)
        finally:
            self.local.blocks_per_tx = depth

    async def make_final(self, proof: dict[str, Any]) -> None:
        self.local.mine(1)

    def unknown_proof(self) -> dict[str, Any]:
        return {"tx": "0x" + os.urandom(32).hex()}

    def malformed_proofs(self) -> list[dict[str, Any]]:
        h = "ab" * 32
        return [{"tx": "0x" + h[:-2]}, {"tx": "0x" + h + "00"}, {"tx": "0x" + "g" * 64}, {"tx": " 0x" + h},
                {"tx": "0x"}, {"tx": "0x0x" + h[:-4]}]

    def proof_spellings(self, proof: dict[str, Any]) -> list[dict[str, Any]]:
        bare = str(proof["tx"])[2:]
        return [{"tx": bare}, {"tx": "0x" + bare.upper()}, {"tx": "0X" + bare.upper()}, {"tx": bare.upper()}]

    def unavailable_rail(self) -> Rail:
        return make_rail({"backend": "rpc", "rpc_url": closed_port_url(), "network": "local",
                          "chain_id": self.local.chain_id})


class NextBlockRail:
    """The rail under test, followed by one more block after each payment it makes.

    A real chain keeps producing blocks; a dev node in automine mode only mines when a
    transaction arrives, so a payment would sit at 1 confirmation forever. The kit
    verifies at the default depth (2) right after paying; this gives it that block."""

    def __init__(self, rail: BaseRail, dev: DevChain) -> None:
        self.inner = rail
        self._dev = dev
        self.name = rail.name

    @property
    def chains(self) -> tuple[str, ...]:
        return self.inner.chains

    def assets(self) -> tuple[AssetInfo, ...]:
        return self.inner.assets()

    def proof_key(self, proof: dict[str, Any]) -> str:
        return self.inner.proof_key(proof)

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        return await self.inner.verify(proof, expectation)

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        proof = await self.inner.pay(chain=chain, token=token, amount=amount, recipient=recipient)
        await self._dev.mine(1)
        return proof

    def sign_statement(self, message: bytes) -> tuple[str, str] | None:
        return self.inner.sign_statement(message)

    def check_payer_sig(self, payer: str, message: bytes, signature: str) -> bool:
        return self.inner.check_payer_sig(payer, message, signature)

    async def aclose(self) -> None:
        await self.inner.aclose()


class NodeHarness(_OnBaseLocal):
    """The conformance harness over a real JSON-RPC dev node (anvil or the eth-tester node),
    driven only through JSON-RPC (`DevChain`); the node mines a block per transaction."""

    _rail: NextBlockRail

    def __init__(self, node: RunningNode, rail: BaseRail, payer: str) -> None:
        self.node = node
        self._rail = NextBlockRail(rail, node.dev)
        self._payer = payer.lower()

    @classmethod
    async def start(cls, node: RunningNode) -> NodeHarness:
        payer = Account.create()
        await node.dev.fund(payer.address, eth=10**20, usdc=10**13)
        rail = make_rail({"backend": "rpc", "rpc_url": node.url, "network": "local",
                          "chain_id": node.chain_id, "keypair": bytes(payer.key), "poll_interval": 0.01})
        return cls(node, rail, payer.address)

    def new_wallet(self) -> str:
        return str(Account.create().address)

    async def failed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        poor = Account.create()
        await self.node.dev.fund(poor.address, eth=10**17)
        tx = reverting_payment(self.node.chain_id, USDC_LOCAL, token, amount, recipient)
        tx_hash = await self.node.dev.send_raw(bytes(poor.sign_transaction(tx).raw_transaction))
        receipt = await self.node.dev.wait_receipt(tx_hash)
        assert int(receipt["status"], 16) == 0, "the harness's failed payment must revert"
        await self.node.dev.mine(1)
        return {"tx": tx_hash}

    async def unconfirmed_payment(self, token: str, amount: int, recipient: str) -> dict[str, Any]:
        # The inner rail: only the transaction's own block, 1 of 2 confirmations.
        return await self._rail.inner.pay(chain=self.chain, token=token, amount=amount, recipient=recipient)

    async def make_final(self, proof: dict[str, Any]) -> None:
        await self.node.dev.mine(1)

    def unknown_proof(self) -> dict[str, Any]:
        return {"tx": "0x" + os.urandom(32).hex()}

    def malformed_proofs(self) -> list[dict[str, Any]]:
        return BaseHarness.malformed_proofs(self)  # type: ignore[arg-type]

    def proof_spellings(self, proof: dict[str, Any]) -> list[dict[str, Any]]:
        return BaseHarness.proof_spellings(self, proof)  # type: ignore[arg-type]

    def unavailable_rail(self) -> Rail:
        return make_rail({"backend": "rpc", "rpc_url": closed_port_url(), "network": "local",
                          "chain_id": self.node.chain_id})
