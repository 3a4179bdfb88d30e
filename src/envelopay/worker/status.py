"""The worker's side of the status extension past the inbound step (SPEC.md "Status while
working"): the job runner tells a buyer whose ORDER named `status` that its job started
running, or that it waits for an operator (`held`); `jobs retry` tells it the job is
`queued` again. The first `queued` WAIT goes with the job's own commit (engine/status.py);
WHATSUP is answered by the engine.

The runner's WAIT is written in a commit of its own, after the job's move: informative,
never a condition of the work; a crash between the move and that commit loses the WAIT,
never the job (a WHATSUP still reads the state). The retry's `queued` WAIT rides in the
requeue's own commit (`wait_commit` with the move), as the first `queued` does in the
accepting step. At most once per (job, state, round, start): the Message-ID is made of
them and the outbox keeps one row per Message-ID. The round (`jobs retry`'s earlier
rounds, len(job.rounds)) is in the id because a retry starts the attempts over: without
it the retried round's WAITs would reuse the first round's ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Protocol

from envelopay.engine.step_facts import out_entry
from envelopay.ledger.jobs import Job, JobMove
from envelopay.ledger.store import Commit, FlowRecord, Store
from envelopay.protocol.autosubmit import AUTO_GENERATED
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.status import STATUS, body_advertises, wait_message

__all__ = ["Teller", "tell_job", "wait_commit", "wait_key"]


class Teller(Protocol):
    """What telling reads of the engine (envelopay.engine.Engine has all five)."""

    store: Store
    address: str
    domain: str
    clock: Callable[[], datetime]
    extensions: frozenset[str]


def _reply_to_last(flow: FlowRecord) -> tuple[str | None, tuple[str, ...]]:
    last = flow.data.get("last_in")
    if isinstance(last, Mapping) and isinstance(last.get("message_id"), str):
        return last["message_id"], tuple(last.get("references", ()))
    return None, ()


def wait_key(job: Job, state: str) -> str:
    """What names the WAIT saying `job` entered `state`: `<job>.<state>.<attempts>` in the
    first round (the ids written before rounds existed, so an upgraded worker does not
    tell again), `<job>.<state>.r<round>.<attempts>` after a retry."""
    rounds = len(job.rounds)
    round_part = f"r{rounds}." if rounds else ""
    return f"{job.job_id}.{state}.{round_part}{job.attempts}"


def tell_job(engine: Teller, job: Job, state: str) -> str | None:
    """Write the WAIT saying `job` is now in `state`, when this worker speaks `status` and
    the job's ORDER named it; its Message-ID, or None when nothing was written (blocking:
    run it in a thread from the event loop)."""
    commit = wait_commit(engine, job, state, engine.clock())
    if commit is None or engine.store.commit_step(commit) != "ok":
        return None
    return str(commit.outcome["message_id"])


def wait_commit(
    engine: Teller, job: Job, state: str, now: datetime, move: JobMove | None = None
) -> Commit | None:
    """The commit writing the WAIT that says `job` (as it is once `move` is applied) is in
    `state`, with `move` in the same transaction (a requeue: its WAIT and its move are
    written together or not at all); None when there is nothing to tell — this worker or
    the ORDER did not name `status`, or this (job, state, round, start) was told already."""
    store = engine.store
    flow = store.get_flow(job.flow_id) if STATUS in engine.extensions else None
    order = flow.data.get("order") if flow is not None else None
    if flow is None or not isinstance(order, Mapping) or not body_advertises(order):
        return None
    key = wait_key(job, state)
    message_id = f"<wait.{key}@{engine.domain}>"
    if store.outbox_get(message_id) is not None:
        return None  # told already (a second call after a crash, or a second runner)
    times = job.times()
    times.setdefault(state, now)
    wait = wait_message(id=f"wait_{key.replace('.', '_')}"[:256], order_ref=str(order.get("id")),
                        state=state, times=times)
    irt, refs = _reply_to_last(flow)
    ob = Outbound(engine.address, flow.peer, wait, message_id, now, irt, refs, auto_submitted=AUTO_GENERATED)
    return Commit(local=engine.address, now=now, log=(out_entry(flow.flow_id, ob, now),),
                  outcome={"status": "sent", "flow_id": flow.flow_id, "message_id": message_id},
                  message_ids=((message_id, flow.flow_id),), outbox=((ob, flow.flow_id),), job_move=move)
