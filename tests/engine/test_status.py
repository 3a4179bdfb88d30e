"""The `status` extension end to end over real ledgers (SQLite and PostgreSQL): a buyer
that speaks it asks with WHATSUP and gets WAIT with the job's state; a strict buyer
receives nothing new; neither message moves a flow (SPEC.md "Status while working")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import pytest

from envelopay.dkim import DkimResult
from envelopay.engine import Engine, Enqueue, Outcome
from envelopay.engine.status import JobReport, accepted_wait
from envelopay.errors import UsageError
from envelopay.ledger.store import FlowRecord, Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import (
    Fulfill,
    Invoice,
    Message,
    Oops,
    OopsError,
    Order,
    Wait,
    Whatsup,
    Which,
)
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

SPEAKS = partial(parse, options=ParseOptions(extensions=frozenset({"status"})))


class Jobs:
    """A job source the test moves by hand (the ledger's jobs are the runner's)."""

    def __init__(self) -> None:
        self.now: dict[str, JobReport] = {}

    def __call__(self, flow: FlowRecord) -> JobReport | None:
        return self.now.get(flow.flow_id)


class World:
    """A worker that speaks `status`, and a buyer that does (`strict=False`) or not."""

    def __init__(self, store: Store, *, strict_buyer: bool = False) -> None:
        self.store = store
        self.rail = k.DictRail()
        self.clock = k.Clock()
        self.jobs = Jobs()
        self.worker = self.engine(k.WORKER, WorkerApp(self.rail), "w", self.rail, parser=SPEAKS,
                                  job_source=self.jobs)
        buyer_rail = k.DictRail(self.rail.txs, wallet=k.BUYER_WALLET)
        extra: dict[str, Any] = {} if strict_buyer else {"parser": SPEAKS}
        self.buyer = self.engine(k.BUYER, WorkerApp(buyer_rail, wallet=k.BUYER_WALLET), "b", buyer_rail,
                                 **extra)
        self.seen: list[Message] = []  # every message delivered, in order

    def engine(self, address: str, app: Any, prefix: str, rail: k.DictRail, **kw: Any) -> Engine:
        return Engine(self.store, address=address, domain=address.split("@")[1], rails={k.CHAIN: rail},
                      app=app, clock=self.clock, id_factory=k.counter_ids(prefix), **kw)

    async def deliver(self) -> list[Outcome]:
        out = []
        for row in self.store.outbox_pending(self.clock.now, limit=1000):
            target = {k.WORKER: self.worker, k.BUYER: self.buyer}[row.outbound.recipient]
            self.seen.append(row.outbound.message)
            out.append(await target.handle(compose(row.outbound)))
            self.store.mark_sent(row.outbound.message_id, self.clock.now)
        return out

    async def order_paid(self) -> str:
        """WHICH → METHODS → ORDER → INVOICE → PAY → FULFILL; the buyer's flow id."""
        sent = await self.buyer.send(Which(id="wch_1", task={"op": "echo"}), k.WORKER)
        await self.deliver()
        await self.deliver()
        await self.buyer.send(Order(id="ord_1", task={"op": "echo"}), k.WORKER, flow_id=sent.flow_id)
        await self.deliver()
        await self.deliver()
        inv = next(m for m in self.seen if isinstance(m, Invoice))
        self.rail.txs["tx1"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=k.BUYER_WALLET)
        await self.buyer.send(k.pay("pay_1", "tx1", invoice_ref=inv.id), k.WORKER, flow_id=sent.flow_id)
        await self.deliver()
        await self.deliver()
        return sent.flow_id


@pytest.fixture
async def world(store: Store) -> AsyncIterator[World]:
    yield World(store)


def _worker_flow(world: World) -> FlowRecord:
    flows = [f for f in world.store.list_flows(k.WORKER) if f.local == k.WORKER]
    assert len(flows) == 1
    return flows[0]


async def test_a_status_buyer_advertises_and_the_worker_answers_in_kind(world: World) -> None:
    flow_id = await world.order_paid()
    which, methods = world.seen[0], world.seen[1]
    assert isinstance(which, Which) and which.extensions == ["status"]
    # The reference test app builds its own METHODS; the worker's does (test_worker_methods_*).
    assert methods.type == "methods"
    order = world.seen[2]
    assert isinstance(order, Order) and order.extensions == ["status"]
    assert isinstance(world.seen[-1], Fulfill)
    before = world.store.get_flow(flow_id)
    assert before is not None and before.state == "fulfilled"

    asked = world.buyer.send_whatsup(flow_id)
    [at_worker] = await world.deliver()
    assert at_worker.status == "processed" and at_worker.detail == "WHATSUP"
    [at_buyer] = await world.deliver()
    wait = world.seen[-1]
    assert isinstance(wait, Wait) and wait.state == "done" and wait.order_ref == "ord_1"
    assert wait.ref == asked.outbound.message.id  # type: ignore[union-attr]
    assert at_buyer.status == "processed" and at_buyer.flow_id == flow_id
    after = world.store.get_flow(flow_id)
    assert after is not None and (after.state, after.version) == (before.state, before.version)
    log = [(e.direction, e.type) for e in world.store.flow_log(flow_id)]
    assert log[-2:] == [("out", "whatsup"), ("in", "wait")]
    wlog = [(e.direction, e.type) for e in world.store.flow_log(_worker_flow(world).flow_id)]
    assert wlog[-2:] == [("in", "whatsup"), ("out", "wait")]


async def test_the_asker_gets_queued_running_done_as_the_job_moves(world: World) -> None:
    flow_id = await world.order_paid()
    worker_flow = _worker_flow(world).flow_id
    t0 = datetime(2026, 12, 4, 23, 0, tzinfo=k.T0.tzinfo)
    states = []
    times: dict[str, datetime] = {}
    for i, state in enumerate(("queued", "running", "done")):
        times[state] = t0 + timedelta(seconds=i)
        world.jobs.now[worker_flow] = JobReport(state, dict(times))
        world.buyer.send_whatsup(flow_id)
        await world.deliver()
        await world.deliver()
        wait = world.seen[-1]
        assert isinstance(wait, Wait)
        states.append((wait.state, sorted(wait.at)))
    assert states == [("queued", ["queued"]), ("running", ["queued", "running"]),
                      ("done", ["done", "queued", "running"])]


async def test_before_payment_the_answer_is_unpaid(world: World) -> None:
    sent = await world.buyer.send(Order(id="ord_7", task={"op": "echo"}), k.WORKER)
    await world.deliver()
    await world.deliver()
    world.buyer.send_whatsup(sent.flow_id)
    await world.deliver()
    await world.deliver()
    wait = world.seen[-1]
    assert isinstance(wait, Wait) and wait.state == "unpaid"


async def test_a_redelivered_whatsup_gets_no_second_wait(world: World) -> None:
    flow_id = await world.order_paid()
    asked = world.buyer.send_whatsup(flow_id)
    raw = compose(asked.outbound)
    first = await world.worker.handle(raw)
    again = await world.worker.handle(raw)
    assert again.repeat == "message_id" and again.outbox == first.outbox and len(first.outbox) == 1


async def test_a_whatsup_about_no_order_of_the_sender_is_unknown_ref(world: World) -> None:
    await world.order_paid()
    stranger = k.raw(Whatsup(id="wsup_x", order_ref="ord_1"), sender="other@client.test")
    o = await world.worker.handle(stranger)
    assert (o.status, o.oops) == ("refused", OopsCode.UNKNOWN_REF)
    row = world.store.outbox_get(o.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Oops)


async def test_a_wait_about_no_order_is_recorded_and_not_answered(world: World) -> None:
    o = await world.buyer.handle(k.raw(Wait(id="w9", order_ref="nope", state="queued"),
                                       sender=k.WORKER, to=k.BUYER))
    assert o.status == "ignored" and o.outbox == () and "WAIT" in o.detail


async def test_asking_about_a_flow_that_is_not_our_order_is_a_usage_error(world: World) -> None:
    o = await world.worker.handle(k.raw(k.order("ord_5")))
    with pytest.raises(UsageError, match="no order flow"):
        world.worker.send_whatsup(o.flow_id or "")  # the worker's side of it
    with pytest.raises(UsageError, match="no order flow"):
        world.buyer.send_whatsup("flow_missing")


async def test_a_strict_buyer_receives_nothing_new(store: Store) -> None:
    world = World(store, strict_buyer=True)
    await world.order_paid()
    to_buyer = [m for m in world.seen if m.type in ("methods", "invoice", "fulfill", "oops", "wait")]
    assert [m.type for m in to_buyer] == ["methods", "invoice", "fulfill"]
    assert all("extensions" not in m.model_dump(exclude_none=True) for m in world.seen)
    assert not any(r.outbound.message.type in ("wait", "whatsup")
                   for r in store.outbox_pending(world.clock.now + timedelta(days=1), limit=100))


async def test_a_strict_worker_answers_a_whatsup_unknown_type(store: Store) -> None:
    # Why a WHATSUP never goes to a peer that did not advertise: the spec's answer.
    strict = Engine(store, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(),
                    clock=k.Clock(), id_factory=k.counter_ids("s"))
    o = await strict.handle(k.raw(Whatsup(id="wsup_1", order_ref="ord_1")))
    assert (o.status, o.oops) == ("refused", OopsCode.UNKNOWN_TYPE)


def test_accepted_wait_only_for_an_order_that_advertised() -> None:
    ids = iter(range(100))

    def new_id(prefix: str) -> str:
        return f"{prefix}_{next(ids)}"

    assert accepted_wait({"id": "ord_1", "task": "t"}, new_id=new_id, now=k.T0) is None
    assert accepted_wait(None, new_id=new_id, now=k.T0) is None
    assert accepted_wait({"extensions": ["status"]}, new_id=new_id, now=k.T0) is None  # no id to name
    wait = accepted_wait({"id": "ord_1", "extensions": ["status"]}, new_id=new_id, now=k.T0)
    assert wait is not None and (wait.state, wait.order_ref, list(wait.at)) == ("queued", "ord_1", ["queued"])


class JobApp(WorkerApp):
    """Takes paid work on as a job (the runner's to answer later)."""

    async def fulfill(self, order: Order, pay: Any, ctx: Any) -> Any:
        return Enqueue(task="echo", params={"op": "echo"})


@pytest.mark.parametrize("strict_buyer", [False, True])
async def test_a_job_taken_on_is_told_queued_in_the_same_commit(store: Store, strict_buyer: bool) -> None:
    world = World(store, strict_buyer=strict_buyer)
    world.worker.app = JobApp(world.rail)
    inner = world.worker.parser  # wrapped after the engine is built, as `worker serve`'s observer does
    world.worker.parser = lambda raw: inner(raw)
    flow_id = await world.order_paid()
    worker_flow = _worker_flow(world)
    job = store.job_for_flow(worker_flow.flow_id)  # type: ignore[attr-defined]
    assert job is not None and job.state == "queued"
    told = [m for m in world.seen if isinstance(m, Wait)]
    if strict_buyer:  # its ORDER named nothing: the job is silent until its FULFILL
        assert told == [] and world.seen[-1].type == "pay"
        return
    assert [(w.state, w.order_ref, w.ref) for w in told] == [("queued", "ord_1", None)]
    # The WAIT went in the PAY's commit: the worker's log has it right after the PAY.
    wlog = [(e.direction, e.type) for e in store.flow_log(worker_flow.flow_id)]
    assert wlog[-2:] == [("in", "pay"), ("out", "wait")]
    buyer_flow = store.get_flow(flow_id)
    assert buyer_flow is not None and buyer_flow.state == "paid"  # a WAIT moves no flow
    # Asked now, the worker reads the job row: queued still.
    world.buyer.send_whatsup(flow_id)
    await world.deliver()
    await world.deliver()
    last = world.seen[-1]
    assert isinstance(last, Wait) and last.state == "queued" and last.ref is not None


async def test_an_oops_answering_our_whatsup_moves_no_flow(world: World) -> None:
    flow_id = await world.order_paid()
    sent = world.buyer.send_whatsup(flow_id)
    before = world.store.get_flow(flow_id)
    # A worker that lost the ORDER refuses the question; the buyer's paid flow stays paid.
    refusal = Oops(note="unknown_ref: no such ORDER", id="oops_x", ref=sent.outbound.message.id,  # type: ignore[union-attr]
                   error=OopsError(code="unknown_ref"))
    o = await world.buyer.handle(k.raw(refusal, sender=k.WORKER, to=k.BUYER, in_reply_to=sent.message_id))
    assert (o.status, o.flow_id, o.outbox) == ("processed", flow_id, ())
    assert o.detail == "OOPS unknown_ref answering our WHATSUP"
    after = world.store.get_flow(flow_id)
    assert after is not None and before is not None and (after.state, after.version) == (before.state,
                                                                                          before.version)
    assert world.store.flow_log(flow_id)[-1].oops == "unknown_ref"
    # An OOPS naming anything else of ours is the flow's as before (here: not our WHATSUP).
    assert not world.buyer.status.is_status(Oops(note="x", ref="pay_1"), k.WORKER)


async def test_the_dkim_policy_holds_for_the_extension(world: World) -> None:
    # A WHATSUP whose signature fails is refused (dkim_failed), as any message is: no WAIT
    # tells a forger how a job goes, and a forged WAIT is never recorded as the worker's.
    flow_id = await world.order_paid()
    asked = world.buyer.send_whatsup(flow_id)
    bad = DkimResult("fail", "client.test")
    o = await world.worker.handle(compose(asked.outbound), dkim=bad)
    assert (o.status, o.oops) == ("refused", OopsCode.DKIM_FAILED)
    forged = k.raw(Wait(id="w1", order_ref="ord_1", state="done"), sender=k.WORKER, to=k.BUYER)
    w = await world.buyer.handle(forged, dkim=DkimResult("fail", "garden.test"))
    assert w.status == "refused" and w.oops is OopsCode.DKIM_FAILED
    assert [e.type for e in world.store.flow_log(flow_id)][-1] == "whatsup"  # nothing recorded
