"""Shared set-up for the spend enforcer tests: a LiteSVM chain, the Solana custodial
payer over it, a vault, and agents with funded wallets and spend policies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from solders.keypair import Keypair

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.local import LocalSolana
from envelopay_solana.rail import make_rail

CHAIN = "solana-local"
USDC = 1_000_000  # one USDC in smallest units
VAULT_SECRET = b"test-vault-secret-0123456789abcdef"


@dataclass
class Kit:
    chain: LocalSolana
    payer: SolanaPayer
    payments: Payments
    enforcer: Enforcer

    async def agent(
        self,
        name: str = "buyer",
        *,
        usdc: int = 100 * USDC,
        limit: SpendLimit | None = None,
        payees: tuple[str, ...] = ("partner.test",),
        wallets: tuple[str, ...] = (),
        require_invoice: bool = False,
        allow: tuple[str, ...] = ("partner.test",),
        hourly: int = 1000,
        daily: int = 1000,
    ) -> tuple[str, str]:
        """(token, wallet address) of a new agent with a funded wallet and a policy."""
        _, token = await self.enforcer.create_agent(
            name, f"{name}@agents.test", allow=allow, hourly=hourly, daily=daily
        )
        wallet = await self.payments.create_wallet(name, CHAIN)
        self.chain.airdrop(wallet.address, 10**9)
        if usdc:
            self.chain.mint_tokens(wallet.address, "USDC", usdc)
        limits = {
            f"{CHAIN}/USDC": limit or SpendLimit(per_payment=10 * USDC, hourly=50 * USDC, daily=50 * USDC)
        }
        policy = SpendPolicy(limits=limits, payees=payees, wallets=wallets, require_invoice=require_invoice)
        assert await self.payments.set_policy(name, policy)
        return token, wallet.address

    def usdc_of(self, address: str) -> int:
        from solders.pubkey import Pubkey

        from envelopay_solana import tx as txb

        asset = self.payer.asset("USDC")
        assert asset is not None
        return self.chain.token_balance(txb.ata(Pubkey.from_string(address), asset)) or 0

    def payment_txs(self, payer_address: str) -> list[str]:
        """Every successful transaction on the chain signed by `payer_address`."""
        out = []
        for sig, record in self.chain._records.items():
            keys = record.doc["transaction"]["message"]["accountKeys"]
            signer = keys[0]["pubkey"] if isinstance(keys[0], dict) else keys[0]
            if signer == payer_address and record.doc["meta"]["err"] is None:
                out.append(sig)
        return out


async def greylisted(kit: Kit, sink: Any) -> tuple[str, str, Any]:
    """(token, wallet address, disposition) of an allowed payment whose PAY the payee's
    server would not take yet (a 4xx, as greylisting answers): paid, its email pending.
    The sink keeps answering 4xx until the caller clears `sink.fail_with`."""
    token, address = await kit.agent()
    sink.fail_with = "451 4.7.1 greylisted, try again later"
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
    assert d.state == "paid" and d.tx_id and kit.payment_txs(address) == [d.tx_id], d
    return token, address, d


def payee_wallet() -> str:
    return str(Keypair().pubkey())


def pay_req(wallet: str, amount: int = USDC, key: str = "k1", **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "to": "seller@partner.test",
        "chain": CHAIN,
        "token": "USDC",
        "amount": str(amount),
        "wallet": wallet,
        "idempotency_key": key,
    }
    return {**base, **changes}


async def make_kit(enforcer: Enforcer, *, chain: LocalSolana | None = None, **kw: Any) -> Kit:
    chain = chain or LocalSolana()
    payer = SolanaPayer(make_rail({"local_chain": chain}))
    store = PaymentStore(enforcer.store)
    await store.open()
    payments = Payments(
        enforcer, store, Vault(VAULT_SECRET), {CHAIN: payer}, crash_hook=lambda _p: None, **kw
    )
    return Kit(chain, payer, payments, enforcer)


def proof_tx(proof: Any) -> str | None:
    """The transaction a PAY's proof names, when the proof is bound to its payer as every
    enforced payment's is (tx, payer and payer_sig: SPEC "Proof binding"); else None."""
    if not isinstance(proof, dict) or set(proof) != {"tx", "payer", "payer_sig"}:
        return None
    return proof["tx"] if isinstance(proof["tx"], str) else None
