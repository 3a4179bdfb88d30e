"""The PAY's LMTP transaction into the walled garden begun while its payment is signed
(mail/transport/garden.py GardenEnvelope), against a real GardenServer with accounts, on both stores and a
LiteSVM chain: the PAY is delivered once with its proof; a garden that refuses the PAY for
good (an address it does not hold, no credential, a wrong one) is heard before the
broadcast, so no money moves and the caps are handed back; a failed payment leaves
nothing in the garden; a late body goes on a fresh connection, once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.policy import SpendLimit
from envelopay.mail.garden import GardenServer
from envelopay.mail.garden_auth import new_account
from envelopay.mail.transport.garden import GardenEnvelope, GardenTransport
from envelopay.protocol.parse import parse

from .conftest import Clock
from .paykit import USDC, Kit, make_kit, pay_req, payee_wallet, proof_tx

SELLER = "seller@partner.test"


class Counting(GardenTransport):
    """The real deliverer, counting which way each message went."""

    opened = 0
    plain = 0

    def open_envelope(self, *, sender: str, recipient: str) -> GardenEnvelope:
        self.opened += 1
        return super().open_envelope(sender=sender, recipient=recipient)

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        self.plain += 1
        await super().send(raw, sender, recipient)


@pytest.fixture
async def garden(tmp_path: Path) -> AsyncIterator[tuple[GardenServer, str]]:
    """A garden holding the seller, where the enforcer's account may send as the buyer:
    (server, the enforcer's secret)."""
    account, secret = new_account("enforcer", ["buyer@agents.test"])
    async with GardenServer(tmp_path / "garden", [SELLER], unix_path=tmp_path / "g.sock",
                            accounts=[account]) as server:
        yield server, secret


async def _kit(store: EnforcerStore, clock: Clock, deliverer: GardenTransport) -> Kit:
    return await make_kit(Enforcer(store, deliverer, clock=clock))


async def _paying(
    store: EnforcerStore, clock: Clock, garden: tuple[GardenServer, str], tmp_path: Path, hold: float = 8.0
) -> tuple[Counting, Kit]:
    """The enforcer delivering into the garden with its credential, and its kit."""
    deliverer = Counting(tmp_path / "g.sock", auth=("enforcer", garden[1]), hold=hold, reuse=False)
    return deliverer, await _kit(store, clock, deliverer)


def _inbox(server: GardenServer) -> list[bytes]:
    return [p.read_bytes() for p in sorted((server.maildir(SELLER) / "new").iterdir())]


async def test_the_pay_reaches_the_garden_once_through_its_early_transaction(
    store: EnforcerStore, clock: Clock, garden: tuple[GardenServer, str], tmp_path: Path
) -> None:
    server = garden[0]
    deliverer, kit = await _paying(store, clock, garden, tmp_path)
    token, address = await kit.agent()
    done = [await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key=f"k{n}"))
            for n in range(3)]
    assert [d.status for d in done] == ["paid_and_sent"] * 3, done
    assert (deliverer.opened, deliverer.plain) == (3, 0)  # every PAY went the early way
    mail = _inbox(server)
    assert len(mail) == 3
    proofs = {parse(raw).message_id: proof_tx((parse(raw).body or {}).get("proof")) for raw in mail}
    assert proofs == {d.message_id: d.tx_id for d in done}
    assert sorted(kit.payment_txs(address)) == sorted(d.tx_id for d in done if d.tx_id)


@pytest.mark.parametrize("case", ["unknown_recipient", "no_credential", "wrong_secret"])
async def test_a_pay_the_garden_refuses_for_good_moves_no_money(
    store: EnforcerStore, clock: Clock, garden: tuple[GardenServer, str], tmp_path: Path, case: str
) -> None:
    server, secret = garden
    auth = {"unknown_recipient": ("enforcer", secret), "no_credential": None,
            "wrong_secret": ("enforcer", secret[:-2] + "xx")}[case]
    kit = await _kit(store, clock, Counting(tmp_path / "g.sock", auth=auth, reuse=False))
    # A day's allowance of exactly one payment: a refusal that kept its cap would show.
    token, address = await kit.agent(limit=SpendLimit(per_payment=USDC, hourly=USDC, daily=USDC))
    before = kit.usdc_of(address)
    to = "nobody@partner.test" if case == "unknown_recipient" else SELLER
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, to=to))
    # The garden's 5xx (550 at RCPT, 530 at MAIL, 535 at AUTH) came while the payment was
    # signed: the signed bytes were dropped unsent, so there is no money without its PAY.
    assert (d.status, d.code) == ("failed", "pay_mail_refused"), d
    assert {"unknown_recipient": "550", "no_credential": "530", "wrong_secret": "535"}[case] in d.reason
    assert d.tx_id is None and kit.payment_txs(address) == [] and kit.usdc_of(address) == before
    assert _inbox(server) == []
    again = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, to=to))
    assert (again.status, again.id) == ("failed", d.id)  # the key's first outcome, nothing more
    if case == "unknown_recipient":  # the cap it took was handed back: the day's one payment goes
        ok = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="k2"))
        assert ok.status == "paid_and_sent", ok
        assert len(_inbox(server)) == 1 and kit.payment_txs(address) == [ok.tx_id]


async def test_a_failed_payment_after_the_garden_transaction_began_delivers_nothing(
    store: EnforcerStore, clock: Clock, garden: tuple[GardenServer, str], tmp_path: Path
) -> None:
    server = garden[0]
    deliverer, kit = await _paying(store, clock, garden, tmp_path)
    token, address = await kit.agent(usdc=3 * USDC)
    failed = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 5 * USDC, key="b"))
    assert (failed.status, failed.code) == ("failed", "insufficient_funds"), failed
    assert deliverer.opened == 1  # MAIL and RCPT had gone; the connection was dropped
    await asyncio.sleep(0.05)  # the garden sees the close
    assert _inbox(server) == [] and server.stats.delivered == 0
    ok = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="c"))
    assert ok.status == "paid_and_sent" and len(_inbox(server)) == 1, ok
    assert kit.payment_txs(address) == [ok.tx_id]


async def test_a_body_later_than_the_hold_goes_on_a_fresh_connection_once(
    store: EnforcerStore, clock: Clock, garden: tuple[GardenServer, str], tmp_path: Path
) -> None:
    server = garden[0]
    deliverer, kit = await _paying(store, clock, garden, tmp_path, hold=0.0)
    token, _ = await kit.agent()
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
    assert d.status == "paid_and_sent", d
    assert (deliverer.opened, deliverer.plain) == (1, 1)  # begun early, delivered afresh
    mail = _inbox(server)
    assert len(mail) == 1 and proof_tx((parse(mail[0]).body or {}).get("proof")) == d.tx_id
