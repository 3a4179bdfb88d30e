"""The engine's inbound path end to end over real ledgers (SQLite and PostgreSQL):
flows, threading, replay protection, idempotency, DKIM policy, bad input."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from tests._engines import prepaid

from envelopay.dkim import DkimResult
from envelopay.engine import Engine, Outcome
from envelopay.errors import UsageError
from envelopay.ledger.store import ProofKey, Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Message,
    Offer,
    Oops,
    Order,
    Pay,
    Want,
    Which,
)
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


class World:
    """A worker engine and a buyer engine on one ledger; mail moves by draining outboxes."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.rail = k.DictRail()
        self.buyer_rail = k.DictRail(self.rail.txs, wallet=k.BUYER_WALLET)
        self.app = WorkerApp(self.rail)
        self.buyer_app = WorkerApp(self.buyer_rail, wallet=k.BUYER_WALLET)
        self.clock = k.Clock()
        self.worker = self.engine(k.WORKER, self.app, self.rail, "w")
        self.buyer = self.engine(k.BUYER, self.buyer_app, self.buyer_rail, "b")

    def engine(self, address: str, app: Any, rail: k.DictRail, prefix: str, **kw: Any) -> Engine:
        return Engine(
            self.store,
            address=address,
            domain=address.split("@")[1],
            rails={k.CHAIN: rail},
            app=app,
            clock=self.clock,
            id_factory=k.counter_ids(prefix),
            **kw,
        )

    def pay_tx(self, name: str, amount: int = k.PRICE, to: str = k.WORKER_WALLET, **kw: Any) -> str:
        self.rail.txs[name.lower()] = k.Tx(to, k.TOKEN, amount, **kw)
        return name

    def reply(self, outcome: Outcome, i: int = 0) -> Message:
        row = self.store.outbox_get(outcome.outbox[i])
        assert row is not None
        return row.outbound.message

    async def deliver(self) -> list[Outcome]:
        """Send every pending outbox row to the engine of its recipient."""
        out = []
        for row in self.store.outbox_pending(self.clock.now, limit=1000):
            target = {k.WORKER: self.worker, k.BUYER: self.buyer}[row.outbound.recipient]
            out.append(await target.handle(compose(row.outbound)))
            self.store.mark_sent(row.outbound.message_id, self.clock.now)
        return out


@pytest.fixture
async def world(store: Store) -> AsyncIterator[World]:
    yield World(store)


# ------------------------------------------------------------------- flows


async def test_order_invoice_pay_fulfill(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1"), message_id="<o1@client.test>"))
    assert (o.status, o.state) == ("processed", "invoiced")
    inv = world.reply(o)
    assert isinstance(inv, Invoice) and inv.order_ref == "ord_1" and inv.amount == k.PRICE
    inv_row = world.store.outbox_get(o.outbox[0])
    assert inv_row is not None and inv_row.outbound.in_reply_to == "<o1@client.test>"
    world.pay_tx("tx1")
    p = await world.worker.handle(
        k.raw(
            k.pay("pay_1", "tx1", invoice_ref=inv.id),
            message_id="<p1@client.test>",
            in_reply_to=inv_row.outbound.message_id,
        )
    )
    assert (p.status, p.state, p.flow_id) == ("processed", "fulfilled", o.flow_id)
    ful = world.reply(p)
    assert isinstance(ful, Fulfill) and ful.order_ref == "ord_1"
    assert p.verdict is not None and p.verdict["status"] == "ok"
    log = world.store.flow_log(o.flow_id or "")
    assert [(e.direction, e.type) for e in log] == [
        ("in", "order"),
        ("out", "invoice"),
        ("in", "pay"),
        ("out", "fulfill"),
    ]
    assert log[2].verdict is not None and log[2].verdict["proof_key"] == "tx1"
    assert world.store.proof_status(ProofKey(k.CHAIN, "tx1")) == "spent"
    assert world.app.fulfilled == ["ord_1"]


async def test_free_work_and_repeat_customer(world: World) -> None:
    a = await world.worker.handle(k.raw(k.order("ord_a", op="free"), message_id="<a@client.test>"))
    assert (a.status, a.state) == ("processed", "fulfilled")
    assert isinstance(world.reply(a), Fulfill)
    # A repeat customer replying in the old thread opens a new flow.
    b = await world.worker.handle(
        k.raw(k.order("ord_b"), message_id="<b@client.test>", in_reply_to=a.outbox[0])
    )
    assert b.status == "processed" and b.flow_id != a.flow_id and b.state == "invoiced"


async def test_both_sides_first_contact_with_buyer_engine(world: World) -> None:
    sent = await world.buyer.send(Which(id="wch_1", task={"op": "echo"}), k.WORKER)
    assert sent.state == "asked"
    [methods_out] = await world.deliver()
    assert methods_out.state == "quoted"
    [methods_in] = await world.deliver()
    assert (methods_in.status, methods_in.state, methods_in.flow_id) == ("processed", "quoted", sent.flow_id)
    assert [n.message.type for n in world.buyer_app.notices] == ["methods"]
    # The ORDER follows in the same flow; the engine threads it to the METHODS.
    o = await world.buyer.send(Order(id="ord_1", task={"op": "echo"}), k.WORKER, flow_id=sent.flow_id)
    assert o.state == "ordered" and o.outbound.in_reply_to is not None
    [order_in] = await world.deliver()
    assert order_in.state == "invoiced"
    [invoice_in] = await world.deliver()
    assert invoice_in.state == "invoiced" and invoice_in.flow_id == sent.flow_id
    inv = world.buyer_app.notices[-1].message
    assert isinstance(inv, Invoice)
    proof = await world.buyer_rail.pay(
        chain=inv.chain, token=inv.token, amount=inv.amount, recipient=inv.wallet
    )
    paid = await world.buyer.send(
        Pay(id="pay_1", amount=inv.amount, token=inv.token, chain=inv.chain, proof=proof, invoice_ref=inv.id),
        k.WORKER,
    )
    assert paid.flow_id == sent.flow_id and paid.state == "paid"
    [pay_in] = await world.deliver()
    assert pay_in.state == "fulfilled"
    [ful_in] = await world.deliver()
    assert (ful_in.state, ful_in.flow_id) == ("fulfilled", sent.flow_id)
    buyer_flow = world.store.get_flow(sent.flow_id)
    worker_flow = world.store.get_flow(order_in.flow_id or "")
    assert buyer_flow is not None and buyer_flow.side == "payer" and buyer_flow.kind == "first_contact"
    assert worker_flow is not None and worker_flow.side == "payee" and worker_flow.state == "fulfilled"
    assert len(world.store.flow_log(sent.flow_id)) == 6


async def test_send_refuses_what_the_flow_does_not_allow(world: World) -> None:
    sent = await world.buyer.send(k.order("ord_x"), k.WORKER)
    before = world.store.get_flow(sent.flow_id)
    with pytest.raises(UsageError, match="unexpected_message"):
        await world.buyer.send(k.pay("pay_x", "tx"), k.WORKER, flow_id=sent.flow_id)
    with pytest.raises(UsageError):
        await world.buyer.send(Fulfill(id="f", order_ref="nope", result=1), k.WORKER)
    assert world.store.get_flow(sent.flow_id) == before
    assert len(world.store.outbox_pending(world.clock.now)) == 1


async def test_prepaid_order(world: World) -> None:
    world.pay_tx("pre1")
    order = prepaid("ord_p", "pre1")
    o = await world.worker.handle(k.raw(k.bind(order)))
    assert (o.status, o.state) == ("processed", "fulfilled")
    assert isinstance(world.reply(o), Fulfill)
    # Paid, but below the price: the application refuses; the proof stays spent.
    world.pay_tx("pre2", amount=10)
    cheap = order.model_copy(update={"id": "ord_q", "amount": 10, "proof": {"tx": "pre2"}})
    c = await world.worker.handle(k.raw(k.bind(cheap)))
    assert c.oops is OopsCode.AMOUNT_MISMATCH
    assert world.store.proof_status(ProofKey(k.CHAIN, "pre2")) == "spent"
    # A proof that does not show what the ORDER claims.
    world.pay_tx("pre3", amount=99)
    lie = order.model_copy(update={"id": "ord_r", "proof": {"tx": "pre3"}})
    r = await world.worker.handle(k.raw(k.bind(lie)))
    assert (r.status, r.oops, r.flow_id) == ("refused", OopsCode.AMOUNT_MISMATCH, None)
    assert world.app.fulfilled == ["ord_p"]


async def test_unsolicited_pay_and_exchange(world: World) -> None:
    world.pay_tx("u1")
    p = await world.worker.handle(k.raw(k.bind(k.pay("pay_u", "u1"))))
    assert (p.status, p.state, p.outbox) == ("processed", "paid", ())
    assert [n.message.type for n in world.app.notices] == ["pay"]
    world.pay_tx("g1", amount=7)
    offer = Offer(
        id="ofr_1",
        give=Give(amount=7, token=k.TOKEN, chain=k.CHAIN, to=k.WORKER_WALLET, proof={"tx": "g1"}),
        want=Want(amount=3, token=k.TOKEN, chain=k.CHAIN),
        wallet=k.BUYER_WALLET,
    )
    o = await world.worker.handle(k.raw(k.bind(offer)))
    assert (o.status, o.state) == ("processed", "accepted")
    acc = world.reply(o)
    assert isinstance(acc, Accept) and acc.offer_ref == "ofr_1" and acc.amount == 3
    # A give leg that paid somebody else.
    world.pay_tx("g2", amount=7, to="W-stranger")
    bad = offer.model_copy(
        update={
            "id": "ofr_2",
            "give": offer.give.model_copy(update={"to": "W-stranger", "proof": {"tx": "g2"}}),
        }
    )
    b = await world.worker.handle(k.raw(k.bind(bad)))
    assert b.oops is OopsCode.RECIPIENT_MISMATCH and world.app.accepted == ["ofr_1"]


async def test_buyer_side_verifies_the_accept(world: World) -> None:
    world.buyer_rail.txs["give1"] = k.Tx(k.WORKER_WALLET, k.TOKEN, 7, payer=k.BUYER_WALLET)
    offer = Offer(
        id="ofr_9",
        give=Give(amount=7, token=k.TOKEN, chain=k.CHAIN, to=k.WORKER_WALLET, proof={"tx": "give1"}),
        want=Want(amount=3, token=k.TOKEN, chain=k.CHAIN),
        wallet=k.BUYER_WALLET,
    )
    sent = await world.buyer.send(offer, k.WORKER)
    [at_worker] = await world.deliver()
    assert at_worker.state == "accepted"
    [at_buyer] = await world.deliver()
    assert (at_buyer.status, at_buyer.state, at_buyer.flow_id) == ("processed", "accepted", sent.flow_id)
    assert at_buyer.verdict is not None and at_buyer.verdict["status"] == "ok"


# ------------------------------------------------------ replay and idempotency


async def test_same_raw_twice_is_one_effect_and_the_same_reply(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1")))
    inv = world.reply(o)
    world.pay_tx("tx1")
    raw = k.raw(k.pay("pay_1", "tx1", invoice_ref=inv.id), message_id="<same@client.test>")
    first = await world.worker.handle(raw)
    verifies = world.rail.verify_calls
    second = await world.worker.handle(raw)
    assert second.repeat == "message_id" and first.repeat is None
    assert (second.status, second.state, second.outbox) == (first.status, first.state, first.outbox)
    assert world.rail.verify_calls == verifies and world.app.fulfilled == ["ord_1"]
    # A retransmission (new Message-ID, same content): the recorded reply, re-queued.
    world.store.mark_sent(first.outbox[0], world.clock.now)
    third = await world.worker.handle(
        k.raw(k.pay("pay_1", "tx1", invoice_ref=inv.id), message_id="<again@c.test>")
    )
    assert third.repeat == "retransmission" and third.outbox == first.outbox
    assert [r.outbound.message_id for r in world.store.outbox_pending(world.clock.now)] == [
        o.outbox[0],
        *first.outbox,
    ]
    assert world.app.fulfilled == ["ord_1"] and world.rail.verify_calls == verifies
    # Same id, other content.
    dup = await world.worker.handle(k.raw(k.pay("pay_1", "tx2", invoice_ref=inv.id)))
    assert dup.oops is OopsCode.DUPLICATE_ID


async def test_a_proof_is_spent_forever_whoever_presents_it(world: World) -> None:
    world.pay_tx("tx1")
    a = await world.worker.handle(k.raw(k.bind(k.pay("pay_1", "tx1"))))
    assert a.status == "processed"
    b = await world.worker.handle(k.raw(k.pay("pay_2", "TX1"), sender="mallory@evil.test"))
    assert (b.status, b.oops) == ("refused", OopsCode.PROOF_REPLAYED)
    assert isinstance(world.reply(b), Oops)
    # A rejected proof stays spent when its presenter showed it is theirs (bound).
    world.pay_tx("tx-short", amount=1)
    c = await world.worker.handle(k.raw(k.bind(k.pay("pay_3", "tx-short"))))
    assert c.oops is OopsCode.AMOUNT_MISMATCH
    d = await world.worker.handle(k.raw(k.bind(k.pay("pay_4", "tx-short", amount=1))))
    assert d.oops is OopsCode.PROOF_REPLAYED


async def test_pending_verdict_releases_for_a_retry(world: World) -> None:
    world.pay_tx("slow", status="pending")
    raw1 = k.raw(k.bind(k.pay("pay_s", "slow")), message_id="<s1@client.test>")
    a = await world.worker.handle(raw1)
    assert (a.status, a.oops) == ("refused", OopsCode.NOT_FINAL)
    assert world.store.proof_status(ProofKey(k.CHAIN, "slow")) is None
    world.rail.txs["slow"].status = "ok"
    # The same PAY sent again later (same id and content, new Message-ID) is judged afresh.
    b = await world.worker.handle(k.raw(k.bind(k.pay("pay_s", "slow")), message_id="<s2@client.test>"))
    assert (b.status, b.state, b.repeat) == ("processed", "paid", None)


# --------------------------------------------------------------- bad input


async def test_non_protocol_mail_is_never_answered(world: World) -> None:
    raw = (
        b"From: a@b.test\r\nTo: worker@garden.test\r\nSubject: Re: PAY\r\nMessage-ID: <x@b>\r\n\r\nhello\r\n"
    )
    o = await world.worker.handle(raw)
    assert (o.status, o.outbox) == ("ignored", ())
    assert world.store.outbox_pending(world.clock.now) == []


async def test_invalid_message_gets_its_parse_code_once(world: World) -> None:
    raw = (
        b"From: buyer@client.test\r\nTo: worker@garden.test\r\nSubject: PAY\r\nMessage-ID: <bad@c>\r\n"
        b"Content-Type: text/plain\r\n\r\n{not json\r\n"
    )
    o = await world.worker.handle(raw)
    assert o.status == "refused" and o.oops is not None and len(o.outbox) == 1
    again = await world.worker.handle(raw)
    assert again.repeat == "message_id" and len(world.store.outbox_pending(world.clock.now)) == 1


async def test_refs_that_do_not_fit(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1")))
    inv = world.reply(o)
    flow = world.store.get_flow(o.flow_id or "")
    # Unknown ref: an OOPS, nothing changes.
    f = await world.worker.handle(k.raw(Fulfill(id="f1", order_ref="ord_nope", result=1)))
    assert (f.status, f.oops) == ("refused", OopsCode.UNKNOWN_REF)
    # Underpaying the open invoice.
    world.pay_tx("low", amount=50)
    p = await world.worker.handle(k.raw(k.pay("pay_l", "low", amount=50, invoice_ref=inv.id)))
    assert (p.oops, p.state) == (OopsCode.AMOUNT_MISMATCH, "invoiced")
    assert world.store.proof_status(ProofKey(k.CHAIN, "low")) is None  # never judged: not spent
    # An OOPS that fits nothing is recorded, never answered.
    s = await world.worker.handle(k.raw(Oops(note="huh", ref="zzz")))
    assert s.outbox == ()
    # Typed ref to this flow, In-Reply-To to another flow of the same peer.
    other = await world.worker.handle(k.raw(k.order("ord_2"), message_id="<o2@client.test>"))
    world.pay_tx("tx9")
    c = await world.worker.handle(
        k.raw(
            k.pay("pay_9", "tx9", invoice_ref=inv.id),
            in_reply_to=world.store.outbox_get(other.outbox[0]).outbound.message_id,
        )
    )  # type: ignore[union-attr]
    assert c.oops is OopsCode.THREAD_CONFLICT
    assert world.store.get_flow(o.flow_id or "") == flow
    assert world.store.proof_status(ProofKey(k.CHAIN, "tx9")) is None


async def test_a_peer_cannot_join_someone_elses_flow(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1")))
    inv = world.reply(o)
    world.pay_tx("m1")
    m = await world.worker.handle(k.raw(k.pay("pay_m", "m1", invoice_ref=inv.id), sender="mallory@evil.test"))
    assert m.flow_id != o.flow_id
    flow = world.store.get_flow(o.flow_id or "")
    assert flow is not None and flow.state == "invoiced"


async def test_application_failure_is_task_failed(world: World) -> None:
    async def boom(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("handler bug")

    world.app.order = boom  # type: ignore[method-assign]
    o = await world.worker.handle(k.raw(k.order("ord_1")))
    assert o.oops is OopsCode.TASK_FAILED and isinstance(world.reply(o), Oops)


# -------------------------------------------------------------------- DKIM


async def test_dkim_required_for_proofs(world: World) -> None:
    strict = world.engine(k.WORKER, world.app, world.rail, "s", dkim_policy="required")
    world.pay_tx("d1")
    raw = k.raw(k.bind(k.pay("pay_d", "d1")), message_id="<d1@client.test>")
    forged = await strict.handle(raw, dkim=DkimResult("none"))
    assert forged.oops is OopsCode.DKIM_FAILED
    # Nothing was reserved: the real sender's PAY with the same id and proof goes through.
    ok = await strict.handle(
        k.raw(k.bind(k.pay("pay_d", "d1")), message_id="<d2@client.test>"),
        dkim=DkimResult("pass", "client.test", aligned=True),
    )
    assert (ok.status, ok.state) == ("processed", "paid")
    later = await strict.handle(k.raw(k.pay("pay_e", "e1")), dkim=DkimResult("temperror", "client.test"))
    assert later.status == "deferred" and later.outbox == ()
    # WHICH needs no signature under "required".
    w = await strict.handle(k.raw(Which(id="w1")), dkim=DkimResult("none"))
    assert w.status == "processed"


async def test_dkim_prefer_rejects_a_failing_signature(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1")), dkim=DkimResult("fail", "client.test"))
    assert o.oops is OopsCode.DKIM_FAILED
    o2 = await world.worker.handle(k.raw(k.order("ord_1")), dkim=DkimResult("none"))
    assert o2.status == "processed"


# ------------------------------------------------------------------- crashes


class CrashOnce:
    """Wraps a store: the first commit_step raises, as if the process died there."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.armed = inner, True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit_step(self, commit: Any) -> Any:
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt("crash")
        return self.inner.commit_step(commit)


async def test_crash_between_reserve_and_commit_redoes_the_step(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_1")))
    inv = world.reply(o)
    world.pay_tx("tx1")
    crashy = CrashOnce(world.store)
    first = world.engine(k.WORKER, world.app, world.rail, "c", worker_id="node-1")
    first.store = crashy  # type: ignore[assignment]
    raw = k.raw(k.pay("pay_1", "tx1", invoice_ref=inv.id), message_id="<c1@client.test>")
    with pytest.raises(KeyboardInterrupt):
        await first.handle(raw)
    assert world.store.proof_status(ProofKey(k.CHAIN, "tx1")) == "held"
    # Another worker must wait for the lease; the same worker, restarted, redoes it now.
    other = world.engine(k.WORKER, world.app, world.rail, "o", worker_id="node-2")
    assert (await other.handle(raw)).status == "busy"
    restarted = world.engine(k.WORKER, world.app, world.rail, "r", worker_id="node-1")
    done = await restarted.handle(raw)
    assert (done.status, done.state) == ("processed", "fulfilled")
    assert world.store.proof_status(ProofKey(k.CHAIN, "tx1")) == "spent"
    assert len([e for e in world.store.flow_log(o.flow_id or "") if e.type == "fulfill"]) == 1


async def test_unknown_keyword_gets_unknown_type_with_the_list(world: World) -> None:
    raw = (
        b"From: buyer@client.test\r\nTo: worker@garden.test\r\nSubject: HELLO | hi\r\n"
        b"Message-ID: <h@c>\r\n\r\n"
    )
    o = await world.worker.handle(raw)
    assert (o.status, o.oops) == ("refused", OopsCode.UNKNOWN_TYPE)
    reply = world.reply(o)
    assert isinstance(reply, Oops) and reply.error is not None
    assert reply.error.model_dump()["supported"][0] == "WHICH" and "ACCEPT" in reply.note


async def test_an_empty_received_id_is_not_echoed_as_ref(world: World) -> None:
    body = (
        b'{"v":"0.1.0","type":"pay","id":"","amount":"1","token":"TOK",'
        b'"chain":"testchain","proof":{"tx":"a"}}'
    )
    raw = (
        b"From: buyer@client.test\r\nTo: worker@garden.test\r\nSubject: PAY\r\nMessage-ID: <e@c>\r\n"
        b"Content-Type: application/json\r\n\r\n" + body + b"\r\n"
    )
    o = await world.worker.handle(raw)
    assert o.status == "refused" and o.oops is not None
    reply = world.reply(o)
    assert isinstance(reply, Oops) and reply.ref is None


async def test_first_contact_then_prepaid_order(world: World) -> None:
    sent = await world.buyer.send(Which(id="wch_p"), k.WORKER)
    await world.deliver()  # WHICH → worker, METHODS written
    await world.deliver()  # METHODS → buyer
    world.rail.txs["pre-fc"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=k.BUYER_WALLET)
    order = prepaid("ord_fc", "pre-fc")
    o = await world.buyer.send(order, k.WORKER, flow_id=sent.flow_id)
    assert o.state == "prepaid"
    [at_worker] = await world.deliver()
    assert (at_worker.state, at_worker.verdict is not None) == ("fulfilled", True)
    [at_buyer] = await world.deliver()
    assert (at_buyer.flow_id, at_buyer.state) == (sent.flow_id, "fulfilled")
    assert [e.type for e in world.store.flow_log(sent.flow_id)] == ["which", "methods", "order", "fulfill"]


# ------------------------------------------------------- proofs bound in time


async def _invoice_at(world: World, when: datetime) -> tuple[Outcome, Invoice, str]:
    world.clock.now = when
    o = await world.worker.handle(k.raw(k.order("ord_t"), message_id="<ot@client.test>"))
    inv = world.reply(o)
    assert isinstance(inv, Invoice)
    row = world.store.outbox_get(o.outbox[0])
    assert row is not None
    return o, inv, row.outbound.message_id


async def test_a_transfer_older_than_the_invoice_does_not_pay_it(world: World) -> None:
    # A transfer made an hour before the INVOICE (never claimed by mail) is refused as
    # stale, and the INVOICE stays open for a real payment.
    issued = k.T0 + timedelta(hours=1)
    o, inv, inv_mid = await _invoice_at(world, issued)
    world.pay_tx("old", time=k.T0)
    p = await world.worker.handle(
        k.raw(
            k.pay("pay_old", "old", invoice_ref=inv.id), message_id="<pold@client.test>", in_reply_to=inv_mid
        )
    )
    assert (p.status, p.oops, p.state) == ("refused", OopsCode.STALE_PROOF, "invoiced")
    assert p.verdict is not None and p.verdict["reason"] == "stale"
    # Within the allowed clock drift (10 minutes before issue) the transfer counts.
    world.pay_tx("fresh", time=issued - timedelta(minutes=9))
    q = await world.worker.handle(
        k.raw(
            k.pay("pay_new", "fresh", invoice_ref=inv.id),
            message_id="<pnew@client.test>",
            in_reply_to=inv_mid,
        )
    )
    assert (q.status, q.state, q.flow_id) == ("processed", "fulfilled", o.flow_id)


async def test_invoice_skew_none_turns_the_binding_off(world: World) -> None:
    world.worker = world.engine(k.WORKER, world.app, world.rail, "w2", invoice_skew=None)
    _, inv, inv_mid = await _invoice_at(world, k.T0 + timedelta(days=1))
    world.pay_tx("old2", time=k.T0)
    p = await world.worker.handle(
        k.raw(
            k.pay("pay_o2", "old2", invoice_ref=inv.id), message_id="<po2@client.test>", in_reply_to=inv_mid
        )
    )
    assert (p.status, p.state) == ("processed", "fulfilled")


async def test_proof_window_bounds_every_proof(world: World) -> None:
    world.worker = world.engine(k.WORKER, world.app, world.rail, "w3", proof_window=timedelta(minutes=5))
    world.clock.now = k.T0 + timedelta(minutes=30)
    world.pay_tx("unsolicited", time=k.T0)
    p = await world.worker.handle(k.raw(k.bind(k.pay("pay_u", "unsolicited")), message_id="<pu@client.test>"))
    assert (p.status, p.oops) == ("refused", OopsCode.STALE_PROOF)
