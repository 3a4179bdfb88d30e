"""The remaining refusals of the spend enforcer, each reached: no wallet, the mail caps, a
zero daily cap, a message that is no INVOICE, a key the vault cannot open, a chain that
cannot be reached before signing, and a signed payment whose blockhash expired before it
was broadcast (recovered as `expired`, never signed again)."""

from __future__ import annotations

import contextlib
import mailbox
from pathlib import Path

from envelopay import dkim
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.invoices import MaildirInvoices
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.payments_exec import recover
from envelopay.enforcer.spend.policy import SpendLimit
from envelopay.enforcer.spend.vault import Vault
from envelopay_solana.custody import SolanaPayer
from envelopay_solana.rail import make_rail

from .conftest import Sink
from .paykit import CHAIN, USDC, make_kit, pay_req, payee_wallet


async def test_mail_caps_no_wallet_and_zero_daily_cap_hold_or_block(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    tok, address = await kit.agent("capped", hourly=1, daily=5)
    assert (
        await kit.payments.submit("pay", tok, pay_req(payee_wallet(), key="m1"))
    ).status == "paid_and_sent"
    d = await kit.payments.submit("pay", tok, pay_req(payee_wallet(), key="m2"))
    assert (d.status, d.code) == ("pending_approval", "mail_hourly_cap")
    tok2, _ = await kit.agent("daymail", hourly=5, daily=1)
    assert (
        await kit.payments.submit("pay", tok2, pay_req(payee_wallet(), key="d1"))
    ).status == "paid_and_sent"
    d = await kit.payments.submit("pay", tok2, pay_req(payee_wallet(), key="d2"))
    assert (d.status, d.code) == ("pending_approval", "mail_daily_cap")
    tok3, _ = await kit.agent("nomail", hourly=0)
    d = await kit.payments.submit("pay", tok3, pay_req(payee_wallet(), key="z"))
    assert (d.status, d.code) == ("pending_approval", "mail_cap_zero")
    tok4, _ = await kit.agent("zeroday", limit=SpendLimit(hourly=10 * USDC, daily=0))
    d = await kit.payments.submit("pay", tok4, pay_req(payee_wallet(), key="zd"))
    assert (d.status, d.code) == ("pending_approval", "daily_cap_zero")
    _, tok5 = await enforcer.create_agent("walletless", "walletless@agents.test", allow=("partner.test",))
    d = await kit.payments.submit("pay", tok5, pay_req(payee_wallet(), key="w"))
    assert (d.status, d.code) == ("blocked", "no_wallet")
    assert len(kit.payment_txs(address)) == 1


async def test_a_message_that_is_no_invoice_is_refused(enforcer: Enforcer, tmp_path: Path) -> None:
    root = tmp_path / "mail"
    root.mkdir()
    kit = await make_kit(enforcer, invoices=MaildirInvoices(root), dns=dkim.table_dns({}))
    tok, _ = await kit.agent()
    box = mailbox.Maildir(root / "buyer@agents.test", create=True)
    box.add(
        b"From: seller@partner.test\r\nTo: buyer@agents.test\r\nSubject: hello\r\n"
        b"Message-ID: <plain@partner.test>\r\n\r\nnot an invoice\r\n"
    )
    d = await kit.payments.submit("pay_invoice", tok, {"invoice": "<plain@partner.test>"})
    assert (d.status, d.code) == ("blocked", "invoice_not_an_invoice")


async def test_a_key_the_vault_cannot_open_fails_without_moving_money(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    tok, address = await kit.agent()
    other = Payments(
        enforcer,
        kit.payments.store,
        Vault(b"a-different-vault-secret-0123456789"),
        kit.payments.payers,
        crash_hook=lambda _p: None,
    )
    d = await other.submit("pay", tok, pay_req(payee_wallet()))
    assert (d.status, d.code) == ("failed", "custody") and kit.payment_txs(address) == []
    assert sink.messages == []


async def test_an_unreachable_chain_before_signing_fails_cleanly(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    tok, _ = await kit.agent()
    dead = SolanaPayer(make_rail({"backend": "rpc", "rpc_url": "http://127.0.0.1:9/", "network": "local"}))
    kit.payments.payers[CHAIN] = dead
    d = await kit.payments.submit("pay", tok, pay_req(payee_wallet()))
    assert d.status == "failed" and d.code in ("rail_unavailable", "rpc_unavailable")
    await dead.rail.aclose()


async def test_a_signed_payment_whose_blockhash_expired_ends_expired(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    tok, address = await kit.agent()

    def crash(point: str) -> None:
        if point == "after_sign":
            raise SystemExit("crash between the recorded tx id and the broadcast")

    kit.payments.crash = crash
    to = payee_wallet()
    with contextlib.suppress(SystemExit):
        await kit.payments.submit("pay", tok, pay_req(to, key="exp"))
    intent = await kit.payments.store.by_key((await enforcer.store.agent_by_name("buyer")).id, "exp")  # type: ignore[union-attr]
    assert intent is not None and intent.state == "BROADCAST" and intent.tx_id  # recorded, never sent
    # Another transaction on the chain: the local chain turns its blockhash, so the recorded
    # bytes can never land.
    other = kit.chain.new_wallet(sol=10**9)
    from solders.pubkey import Pubkey

    from envelopay_solana import tx as txb

    sol = kit.payer.asset("SOL")
    assert sol is not None
    kit.chain.send(
        txb.sign(
            txb.payment_instructions(
                other.pubkey(), Pubkey.from_string(payee_wallet()), sol, 10**6, create_ata=False
            ),
            other,
            kit.chain.latest_blockhash(),
        )
    )
    kit.payments.crash = lambda _p: None
    assert await recover(kit.payments) == 1
    d = await kit.payments.submit("pay", tok, pay_req(to, key="exp"))
    assert (d.status, d.code) == ("failed", "expired")
    assert kit.payment_txs(address) == [] and kit.usdc_of(to) == 0 and sink.messages == []


async def test_a_store_fault_and_a_refused_broadcast_are_values(enforcer: Enforcer, sink: Sink) -> None:
    kit = await make_kit(enforcer)
    tok, address = await kit.agent()
    real = kit.payer

    class RefusingNode:
        """Fault injection: the node refuses the broadcast (as a preflight failure would)."""

        chain = real.chain

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        async def broadcast(self, payment: object) -> tuple[str, str]:
            return "failed", "refused by the node"

    kit.payments.payers[CHAIN] = RefusingNode()  # type: ignore[assignment]
    d = await kit.payments.submit("pay", tok, pay_req(payee_wallet(), key="tf"))
    assert (d.status, d.code) == ("failed", "tx_failed") and kit.payment_txs(address) == []
    agent = await enforcer.store.agent_by_name("buyer")
    assert agent is not None
    day = __import__("time").strftime("%Y-%m-%d", __import__("time").gmtime(enforcer.clock()))
    assert await kit.payments.store.spent(agent.id, f"{CHAIN}/USDC", "d", day) == 0  # handed back
    await enforcer.store.close()
    d = await kit.payments.submit("pay", tok, pay_req(payee_wallet(), key="se"))
    assert (d.status, d.code) == ("failed", "store_error")
    assert sink.messages == []
