"""The status extension over real jobs (the job runner, both ledger backends): a buyer that
named `status` in its ORDER is told `queued` in the job's own commit and, asking with
WHATSUP, hears queued, running, done as the runner moves the job; a buyer that did not
name it hears nothing but the FULFILL (SPEC.md "Status while working")."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from tests.worker import _jobs_kit as jk

from envelopay.engine import Engine
from envelopay.engine.outcome import Sent
from envelopay.ledger.jobs import Job, JobMove, JobRound, requeue
from envelopay.ledger.store import Store
from envelopay.node.job_admin import retry_held
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Fulfill, Order, Wait, Whatsup
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp
from envelopay.worker.status import tell_job, wait_commit

SPEAKS = partial(parse, options=ParseOptions(extensions=frozenset({"status"})))


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    gate: str  # the job runs until this file exists


async def gated(p: Gate) -> dict[str, Any]:
    async with asyncio.timeout(60):
        while not Path(p.gate).exists():
            await asyncio.sleep(0.02)
    return {"opened": True}


CFG = jk.config({"name": "gated", "handler": "tests.worker.test_status_jobs:gated",
                 "schema": "tests.worker.test_status_jobs:Gate"})


async def _until(pred: Any, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.02)


def _out(store: Store, flow_id: str) -> list[Any]:
    rows = [store.outbox_get(e.message_id or "") for e in store.flow_log(flow_id) if e.direction == "out"]
    return [r.outbound.message for r in rows if r is not None]


async def _ask(engine: Engine, oid: str, n: int) -> Wait:
    out = await engine.handle(k.raw(Whatsup(id=f"wsup_{n}", order_ref=oid)))
    assert out.status == "processed" and len(out.outbox) == 1, out
    row = engine.store.outbox_get(out.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Wait)
    assert row.outbound.message.ref == f"wsup_{n}"
    return row.outbound.message


async def test_the_asker_hears_queued_running_done(store: Store, tmp_path: Path) -> None:
    engine = jk.worker(store, CFG, parser=SPEAKS)
    gate = tmp_path / "open"
    order = Order(id="ord_s", task={"name": "gated", "gate": str(gate)}, extensions=["status"])
    taken = await engine.handle(k.raw(order))
    flow_id = taken.flow_id or ""
    job = store.job_for_flow(flow_id)  # type: ignore[attr-defined]
    assert job is not None and job.state == "queued"
    # Told unasked, in the ORDER's own commit: the one reply of that step.
    [told] = [store.outbox_get(m) for m in taken.outbox]
    assert told is not None and isinstance(told.outbound.message, Wait)
    assert (told.outbound.message.state, told.outbound.message.ref) == ("queued", None)

    heard = [(await _ask(engine, "ord_s", 1)).state]
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: store.job_get(job.job_id).state == "running")  # type: ignore[attr-defined]
        heard.append((await _ask(engine, "ord_s", 2)).state)
        gate.touch()
        await _until(lambda: store.job_get(job.job_id).state == "done")  # type: ignore[attr-defined]
    last = await _ask(engine, "ord_s", 3)
    heard.append(last.state)
    assert heard == ["queued", "running", "done"]
    assert set(last.at) == {"queued", "running", "done"}
    told = [m.state for m in _out(store, flow_id) if isinstance(m, Wait) and m.ref is None]
    assert told == ["queued", "running"]  # told as the job was taken on and as it started
    kinds = [m.type for m in _out(store, flow_id)]
    assert kinds.count("fulfill") == 1 and kinds.count("wait") == 5  # told twice, asked three times
    flow = store.get_flow(flow_id)
    assert flow is not None and flow.state == "fulfilled"  # the WAITs moved nothing


async def test_a_buyer_that_named_nothing_hears_only_the_fulfill(store: Store, tmp_path: Path) -> None:
    engine = jk.worker(store, CFG, parser=SPEAKS)
    gate = tmp_path / "open"
    gate.touch()
    taken = await engine.handle(k.raw(Order(id="ord_p", task={"name": "gated", "gate": str(gate)})))
    assert taken.outbox == ()  # no WAIT: its ORDER did not name `status`
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: (store.get_flow(taken.flow_id or "") or taken).state == "fulfilled")
    sent = _out(store, taken.flow_id or "")
    assert [type(m) for m in sent] == [Fulfill]
    assert "extensions" not in sent[0].model_dump(exclude_none=True)


async def test_a_held_job_is_told_held_and_nothing_else(store: Store) -> None:
    cfg = jk.config(jk.task("boomer", "tests.worker._jobs_kit:boom", price="100", on_failure="hold"))
    rail = k.DictRail()
    engine = jk.worker(store, cfg, rail, parser=SPEAKS)
    order = jk.prepaid(rail, "ord_h", "txh", name="boomer", amount=100).model_copy(
        update={"extensions": ["status"]})
    taken = await engine.handle(k.raw(order))
    job = store.job_for_flow(taken.flow_id or "")  # type: ignore[attr-defined]
    assert job is not None and job.paid
    runner = jk.runner(engine)
    async with jk.running(runner):
        await _until(lambda: store.job_get(job.job_id).state == "held")  # type: ignore[attr-defined]
    sent = _out(store, taken.flow_id or "")
    assert [(m.type, getattr(m, "state", None)) for m in sent] == [
        ("wait", "queued"), ("wait", "running"), ("wait", "held")]  # no OOPS: the operator decides
    # Told once each: a second telling of the same state and start writes nothing.
    assert tell_job(engine, store.job_get(job.job_id), "held") is None  # type: ignore[arg-type]


async def _deliver(engines: dict[str, Engine]) -> list[Any]:
    """Each pending outbox row handed to the engine it is addressed to (one ledger, two
    addresses, as tests/engine/test_status.py does); the outcomes."""
    store = next(iter(engines.values())).store
    now = datetime.now(UTC) + timedelta(minutes=1)
    outcomes = []
    for row in store.outbox_pending(now, limit=1000):
        outcomes.append(await engines[row.outbound.recipient].handle(compose(row.outbound)))
        store.mark_sent(row.outbound.message_id, now)
    return outcomes


async def _retry_world(
    store: Store, oid: str, *, status: bool = True
) -> tuple[Engine, dict[str, Engine], Sent, Job]:
    """A worker whose task always fails under `hold`, a buyer (both speak `status`) and
    the buyer's prepaid ORDER, naming `status` or not, delivered and taken on: its job."""
    cfg = jk.config(jk.task("boomer", "tests.worker._jobs_kit:boom", price="100", on_failure="hold"))
    rail = k.DictRail()
    engine = jk.worker(store, cfg, rail, parser=SPEAKS)
    buyer_rail = k.DictRail(rail.txs, wallet="W-payer")
    buyer = Engine(store, address=k.BUYER, domain="client.test", rails={k.CHAIN: buyer_rail},
                   app=WorkerApp(buyer_rail, wallet="W-payer"), parser=SPEAKS)
    engines = {k.WORKER: engine, k.BUYER: buyer}
    order = jk.prepaid(rail, oid, f"tx_{oid}", name="boomer", amount=100)
    if not status:  # a strict buyer's ORDER: no `extensions` (the worker still speaks it)
        buyer.settings.extensions = frozenset()
    sent = await buyer.send(order, k.WORKER)
    [taken] = await _deliver(engines)
    assert taken.status == "processed", taken
    return engine, engines, sent, _job_of(store, taken.flow_id or "")


def _job_of(store: Store, flow_id: str) -> Job:
    job = store.job_for_flow(flow_id)
    assert isinstance(job, Job)
    return job


async def _held_in_round(store: Store, engines: dict[str, Engine], job_id: str, n: int) -> list[Any]:
    """Run the worker's runner until the job is held in round `n`; deliver what it told."""

    def held() -> bool:
        job = store.job_get(job_id)
        return job is not None and (job.state, len(job.rounds)) == ("held", n)

    async with jk.running(jk.runner(engines[k.WORKER])):
        await _until(held)
    return await _deliver(engines)


async def test_a_retried_round_is_told_again(store: Store) -> None:
    """`jobs retry` starts the attempts over and tells `queued` for the new round in the
    requeue's own commit; the retried round's WAITs are new mail (the round is in their
    Message-ID), so the buyer hears queued, running and held once per round."""
    engine, engines, sent, job = await _retry_world(store, "ord_r")
    assert job.paid
    first = await _held_in_round(store, engines, job.job_id, 0)
    assert retry_held(store, job.job_id, datetime.now(UTC), engine).done
    requeued = store.job_get(job.job_id)
    assert requeued is not None and (requeued.state, requeued.attempts) == ("queued", 0)
    told = await _deliver(engines)  # the retry's WAIT, before any runner took the job again
    second = await _held_in_round(store, engines, job.job_id, 1)
    everything = first + told + second
    assert all(o.status == "processed" and o.flow_id == sent.flow_id for o in everything), everything
    heard = [(e.type, e.message_id) for e in store.flow_log(sent.flow_id) if e.direction == "in"]
    assert [t for t, _ in heard] == ["wait"] * 6  # queued, running, held; queued, running, held again
    ids = [m for _, m in heard]
    assert len(set(ids)) == 6 and sum(".r1." in (m or "") for m in ids) == 3, ids
    assert ids[3] == f"<wait.{job.job_id}.queued.r1.0@{engine.domain}>"
    waits = [m for m in _out(store, job.flow_id) if isinstance(m, Wait)]
    assert [w.state for w in waits] == ["queued", "running", "held", "queued", "running", "held"]
    assert len({w.id for w in waits}) == 6
    assert set(waits[3].at) == {"queued"} and "held" not in waits[4].at  # the retried round's times
    # Within a round the id is stable: telling the same state again writes nothing.
    assert tell_job(engine, _job_of(store, job.flow_id), "held") is None
    assert await _deliver(engines) == []


async def test_a_retry_tells_a_strict_buyer_nothing(store: Store) -> None:
    """A buyer whose ORDER did not name `status` gets no WAIT from the retry (nor from the
    runner): the job is queued again all the same."""
    engine, engines, _, job = await _retry_world(store, "ord_q", status=False)
    await _held_in_round(store, engines, job.job_id, 0)
    act = retry_held(store, job.job_id, datetime.now(UTC), engine)
    assert act.done and act.job.state == "queued" and len(act.job.rounds) == 1
    assert await _deliver(engines) == []
    assert _out(store, job.flow_id) == []  # held: unanswered; nothing told


async def test_a_retry_that_loses_the_race_tells_nothing(store: Store) -> None:
    """The WAIT and the requeue are one commit: built from a held job that another hand
    moved on meanwhile (here, to refunding), it writes neither."""
    engine, engines, _, job = await _retry_world(store, "ord_l")
    await _held_in_round(store, engines, job.job_id, 0)
    stale = _job_of(store, job.flow_id)
    now = datetime.now(UTC)
    assert store.job_move(JobMove(job.job_id, ("held",), "refunding", now))
    move = requeue(stale, now)
    after = replace(stale, state="queued", attempts=0, at={"queued": now},
                    rounds=tuple(JobRound.from_doc(d) for d in move.fields["rounds"]))
    commit = wait_commit(engine, after, "queued", now, move)
    assert commit is not None and store.commit_step(commit) == "lost"
    assert store.outbox_get(str(commit.outcome["message_id"])) is None
    assert _job_of(store, job.flow_id).state == "refunding"
