"""A proof is bound to the flow it pays (issue 11, items 1 and 2), over real ledgers.

The attacks of the adversarial review: a prepaid ORDER carrying someone else's
transfer; a victim's transfer presented with a wrong amount to burn it; a PAY whose
`invoice_ref` names no INVOICE. Each ends with the victim's honest presentation
going through. The last test runs the binding over the real Solana rail (LiteSVM).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests._engines import prepaid, worker

from envelopay.engine import BaseApplication, Context, Engine
from envelopay.ledger.store import ProofKey, Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Fulfill, Invoice, Message, Methods, Order, Pay, RailMethod, Which
from envelopay.rails.binding import BINDING_SCHEME
from envelopay.testing import mock_rail as k

MALLORY = "mallory@evil.test"
MALLORY_WALLET = "W-mallory"
VICTIM_WALLET = "W-victim"


def reply(store: Store, outcome: Any) -> Message:
    row = store.outbox_get(outcome.outbox[0])
    assert row is not None
    return row.outbound.message


async def test_someone_elses_transfer_buys_no_prepaid_order(store: Store) -> None:
    rail = k.DictRail({"vtx": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=VICTIM_WALLET)})
    eng = worker(store, rail)
    # Unbound: refused, nothing fulfilled, the transfer not spent.
    a = await eng.handle(k.raw(prepaid("ord_m1", "vtx"), sender=MALLORY))
    assert (a.status, a.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    # Bound by Mallory's own wallet: the transfer was not authorised by it.
    signed = k.bind(prepaid("ord_m2", "vtx"), wallet=MALLORY_WALLET, sender=MALLORY)
    b = await eng.handle(k.raw(signed, sender=MALLORY))
    assert (b.status, b.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    # The victim's own binding copied into Mallory's mail: it names the victim's mailbox.
    copied = k.bind(prepaid("ord_m3", "vtx"), wallet=VICTIM_WALLET)
    c = await eng.handle(k.raw(copied, sender=MALLORY))
    assert (c.status, c.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    assert eng.app.fulfilled == []  # type: ignore[attr-defined]
    assert store.proof_status(ProofKey(k.CHAIN, "vtx")) is None
    # The victim's own ORDER, bound by the paying wallet, is served.
    v = await eng.handle(k.raw(k.bind(prepaid("ord_m3", "vtx"), wallet=VICTIM_WALLET)))
    assert (v.status, v.state) == ("processed", "fulfilled")
    assert isinstance(reply(store, v), Fulfill)
    assert store.proof_status(ProofKey(k.CHAIN, "vtx")) == "spent"


async def test_a_wrong_amount_never_burns_someone_elses_transfer(store: Store) -> None:
    rail = k.DictRail({"vtx": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=VICTIM_WALLET)})
    eng = worker(store, rail)
    # Mallory opens an order of his own and pays its INVOICE with the victim's transfer,
    # claiming a wrong amount (unbound: allowed to try against our INVOICE, never to burn).
    o = await eng.handle(k.raw(k.order("ord_x"), sender=MALLORY))
    inv = reply(store, o)
    assert isinstance(inv, Invoice)
    bad = await eng.handle(
        k.raw(k.pay("pay_x", "vtx", amount=k.PRICE + 1, invoice_ref=inv.id), sender=MALLORY)
    )
    assert bad.oops is OopsCode.AMOUNT_MISMATCH
    # And unsolicited, with the wrong amount: unbound, refused before the rail.
    calls = rail.verify_calls
    bad2 = await eng.handle(k.raw(k.pay("pay_y", "vtx", amount=1), sender=MALLORY))
    assert (bad2.oops, rail.verify_calls) == (OopsCode.PAYER_MISMATCH, calls)
    assert store.proof_status(ProofKey(k.CHAIN, "vtx")) is None
    # The victim's honest PAY then goes through.
    v = await eng.handle(k.raw(k.bind(prepaid("ord_v", "vtx"), wallet=VICTIM_WALLET)))
    assert (v.status, v.state) == ("processed", "fulfilled")


async def test_a_bound_rejection_stays_spent(store: Store) -> None:
    # The presenter showed the transfer is theirs and got the amount wrong: spent.
    rail = k.DictRail({"own": k.Tx(k.WORKER_WALLET, k.TOKEN, 7, payer=VICTIM_WALLET)})
    eng = worker(store, rail)
    p = await eng.handle(k.raw(k.bind(k.pay("pay_o", "own", amount=8), wallet=VICTIM_WALLET)))
    assert p.oops is OopsCode.AMOUNT_MISMATCH
    assert store.proof_status(ProofKey(k.CHAIN, "own")) == "spent"


async def test_pay_naming_no_invoice_is_unknown_ref_and_spends_nothing(store: Store) -> None:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=VICTIM_WALLET)})
    eng = worker(store, rail)
    calls = rail.verify_calls
    p = await eng.handle(k.raw(k.bind(k.pay("pay_1", "t1", invoice_ref="inv_nowhere"), wallet=VICTIM_WALLET)))
    assert (p.status, p.oops, p.flow_id) == ("refused", OopsCode.UNKNOWN_REF, None)
    assert rail.verify_calls == calls
    assert store.proof_status(ProofKey(k.CHAIN, "t1")) is None
    ok = await eng.handle(k.raw(k.bind(k.pay("pay_2", "t1"), wallet=VICTIM_WALLET)))
    assert (ok.status, ok.state) == ("processed", "paid")


async def test_required_binding_refuses_an_unbound_invoice_payment(store: Store) -> None:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=k.BUYER_WALLET)})
    eng = worker(store, rail, proof_binding="required")
    o = await eng.handle(k.raw(k.order("ord_1")))
    inv = reply(store, o)
    assert isinstance(inv, Invoice) and inv.binding == BINDING_SCHEME  # the INVOICE says so
    mid = o.outbox[0]
    a = await eng.handle(k.raw(k.pay("pay_1", "t1", invoice_ref=inv.id), in_reply_to=mid))
    assert a.oops is OopsCode.PAYER_MISMATCH
    b = await eng.handle(
        k.raw(k.bind(k.pay("pay_2", "t1", invoice_ref=inv.id), wallet=k.BUYER_WALLET), in_reply_to=mid)
    )
    assert (b.status, b.state) == ("processed", "fulfilled")


async def test_methods_names_the_binding(store: Store) -> None:
    eng = worker(store, k.DictRail())
    w = await eng.handle(k.raw(Which(id="w1")))
    m = reply(store, w)
    assert isinstance(m, Methods) and m.binding == BINDING_SCHEME


# -------------------------------------------------------- over the real Solana rail


class SolApp(BaseApplication):
    def __init__(self, wallet: str) -> None:
        self.my_wallet = wallet
        self.fulfilled: list[str] = []

    def wallet(self, chain: str, token: str) -> str | None:
        return self.my_wallet if (chain, token) == ("solana-local", "SOL") else None

    async def methods(self, which: Which, ctx: Context) -> Methods:
        return Methods(
            rails=[RailMethod(chain="solana-local", token="SOL", wallet=self.my_wallet, price=10**6)]
        )

    async def order(self, order: Order, ctx: Context, *, paid: int | None) -> Fulfill | None:
        if paid is not None and paid >= 10**6:
            self.fulfilled.append(order.id)
            return Fulfill(id=ctx.new_id("ful"), order_ref=order.id, result="done")
        return None

    async def fulfill(self, order: Order, pay: Pay, ctx: Context) -> Fulfill:
        return Fulfill(id=ctx.new_id("ful"), order_ref=order.id, result="done")


async def test_binding_over_solana(store: Store) -> None:
    from envelopay_solana import LocalSolana, make_rail

    chain = LocalSolana()
    victim_kp = chain.new_wallet(sol=10**10)
    mallory_kp = chain.new_wallet(sol=10**10)
    worker_kp = chain.new_wallet(sol=10**9)
    wallet = str(worker_kp.pubkey())
    app = SolApp(wallet)
    w = Engine(
        store,
        address=k.WORKER,
        domain="garden.test",
        app=app,
        clock=k.Clock(),
        rails={"solana-local": make_rail({"local_chain": chain, "keypair": bytes(worker_kp)})},
        id_factory=k.counter_ids("w"),
    )
    victim_rail = make_rail({"local_chain": chain, "keypair": bytes(victim_kp)})
    victim = Engine(
        store,
        address=k.BUYER,
        domain="client.test",
        app=BaseApplication(),
        clock=k.Clock(),
        rails={"solana-local": victim_rail},
        id_factory=k.counter_ids("v"),
    )
    mallory = Engine(
        store,
        address=MALLORY,
        domain="evil.test",
        app=BaseApplication(),
        clock=k.Clock(),
        rails={"solana-local": make_rail({"local_chain": chain, "keypair": bytes(mallory_kp)})},
        id_factory=k.counter_ids("m"),
    )
    proof = await victim_rail.pay(chain="solana-local", token="SOL", amount=10**6, recipient=wallet)
    order = Order(
        v="0.2.0", id="ord_s", task="t", amount=10**6, token="SOL", chain="solana-local", proof=proof
    )

    # Mallory presents the victim's transfer; his engine binds it with his own wallet.
    stolen = await mallory.send(order, k.WORKER)
    row = store.outbox_get(stolen.message_id)
    assert row is not None and isinstance(row.outbound.message, Order)
    assert row.outbound.message.proof is not None and row.outbound.message.proof["payer"] == str(
        mallory_kp.pubkey()
    )
    a = await w.handle(compose(row.outbound))
    assert (a.status, a.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    assert app.fulfilled == []
    # The victim's engine binds it with the paying wallet: served once, and spent.
    mine = await victim.send(order, k.WORKER)
    vrow = store.outbox_get(mine.message_id)
    assert vrow is not None
    b = await w.handle(compose(vrow.outbound))
    assert (b.status, b.state) == ("processed", "fulfilled")
    assert app.fulfilled == ["ord_s"]
    assert store.proof_status(ProofKey("solana-local", victim_rail.proof_key(proof))) == "spent"


class GatedRail(k.DictRail):
    """The test rail, but a verification waits for `gate` (a presentation in flight)."""

    def __init__(self, txs: dict[str, k.Tx]) -> None:
        super().__init__(txs)
        self.gate = asyncio.Event()
        self.entered = asyncio.Event()

    async def verify(self, proof: dict[str, Any], expectation: Any) -> Any:
        self.entered.set()
        await self.gate.wait()
        return await super().verify(proof, expectation)


async def test_a_thiefs_presentation_in_flight_never_answers_the_owner_replayed(store: Store) -> None:
    rail = GatedRail({"vtx": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=VICTIM_WALLET)})
    eng = worker(store, rail)
    stolen = k.bind(prepaid("ord_t", "vtx"), wallet=MALLORY_WALLET, sender=MALLORY)
    thief = asyncio.create_task(eng.handle(k.raw(stolen, sender=MALLORY)))
    await rail.entered.wait()  # the thief's proof is held while the rail looks
    own = k.raw(k.bind(prepaid("ord_v", "vtx"), wallet=VICTIM_WALLET), message_id="<own@client.test>")
    first = await eng.handle(own)
    assert first.status == "busy"  # not a final proof_replayed
    rail.gate.set()
    assert (await thief).oops is OopsCode.PAYER_MISMATCH
    again = await eng.handle(own)
    assert (again.status, again.state) == ("processed", "fulfilled")


def test_the_config_chooses_the_binding_policy(tmp_path: Path) -> None:
    from envelopay.config import load_config
    from envelopay.node.agent_node import build_node
    from envelopay.node.init import init_agent

    init_agent(tmp_path, address="w@garden.local")
    toml = tmp_path / "envelopay.toml"
    text = toml.read_text().replace("[agent]", '[agent]\nproof_binding = "required"', 1)
    toml.write_text(
        text.replace(
            'garden_root = "var/garden"', f'garden_root = "var/garden"\ngarden_socket = "{tmp_path}/s"'
        )
    )
    node = build_node(load_config(toml))
    try:
        assert node.engine.proof_binding == "required"
    finally:
        node.store.close()
