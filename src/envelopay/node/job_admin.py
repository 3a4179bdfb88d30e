"""The operator's hand on a worker's jobs (`envelopay jobs list|refund|retry`, SPEC.md
"Refunds"): a paid job that failed under the task policy `hold` waits, unanswered, until
the operator refunds it (the buyer gets OOPS task_failed with the refund) or retries it
(queued again: the serving worker's runner takes it, and FULFILL goes out if it succeeds;
a buyer whose ORDER named `status` is told `queued` for the new round, in the requeue's
own commit).

Both act through the ledger's conditional job moves, so two operators (or an operator and
the runner) never act twice on one job; the refund itself is the worker's Refunder, keyed
`job:<id>`, so it is paid at most once however often it is asked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from envelopay.config import WorkerConfig
from envelopay.errors import ConfigError, UsageError
from envelopay.ledger.jobs import Job, JobMove, JobRound, requeue
from envelopay.ledger.store import Store
from envelopay.node.agent_node import build_node, open_store
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.runner import settle_job
from envelopay.worker.status import Teller, wait_commit

__all__ = ["JobAct", "job_doc", "list_jobs", "refund_job", "retry_held", "retry_job"]


@dataclass(frozen=True, slots=True)
class JobAct:
    """What an operator's command did: the job as it is now, and whether it got what was asked."""

    job: Job
    done: bool
    detail: str = ""


def job_doc(job: Job) -> dict[str, Any]:
    return {
        "job": job.job_id, "flow": job.flow_id, "peer": job.peer, "task": job.task, "state": job.state,
        "policy": job.policy, "chain": job.chain, "token": job.token, "amount": str(job.amount),
        "payer": job.payer, "error": job.error, "refund": dict(job.refund) if job.refund else None,
        "attempts": job.attempts, "updated_at": job.updated_at.isoformat(),
        "at": {state: when.isoformat() for state, when in job.times().items()},
        "rounds": [r.doc() for r in job.rounds],  # the earlier rounds of attempts, before each retry
    }


def list_jobs(cfg: WorkerConfig, states: Sequence[str] = (), limit: int = 100) -> list[Job]:
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        return store.job_list(cfg.agent.address, states or None, limit)
    finally:
        store.close()


def _held(job: Job | None, job_id: str, verb: str) -> Job:
    if job is None:
        raise UsageError(f"JOB: no job {job_id!r} in this worker's ledger")
    if job.state != "held":
        raise UsageError(f"JOB: {job_id} is {job.state}; only a held job is {verb} by hand")
    return job


async def refund_job(cfg: WorkerConfig, job_id: str, now: datetime) -> JobAct:
    """Refund a held paid job and answer its buyer OOPS task_failed with the refund."""
    ledger = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:  # bad input is judged before the node (its transport, its rails) is built
        job = _held(ledger.job_get(job_id), job_id, "refunded")
        if not job.paid:
            raise UsageError(f"JOB: {job_id} was not paid: there is nothing to refund (retry it instead)")
    finally:
        ledger.close()
    node = build_node(cfg)
    try:
        store, app = node.engine.store, node.engine.app
        refunder = app.refunder if isinstance(app, WorkerApplication) else None
        if refunder is None:
            raise ConfigError("this worker cannot pay refunds: no [rails] keypair and no enforcer payments")
        if not store.job_move(JobMove(job_id, ("held",), "refunding", now)):
            raise UsageError(f"JOB: {job_id} moved on meanwhile; look again with `envelopay jobs list`")
        moving = store.job_get(job_id)
        assert moving is not None
        settled = await settle_job(node.engine, store, moving, RefundOnFailure(refunder), lambda: now)
        await node.drain()  # the OOPS leaves now, not at the serving worker's next drain
        after = await _settled(store, job_id, settled or moving)
        refund = dict(after.refund or {})
        return JobAct(after, after.state == "refunded", str(refund.get("error") or ""))
    finally:
        await node.close()
        node.engine.store.close()


async def _settled(store: Store, job_id: str, job: Job, wait: float = 30.0) -> Job:
    """The job once its refund is settled: a serving worker's runner may be the one paying
    it (it scans refunding jobs too; one of them holds the refund's lease), so a job still
    `refunding` is read again for a while."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while job.state == "refunding" and loop.time() < deadline:
        await asyncio.sleep(0.25)
        job = store.job_get(job_id) or job
    return job


class _Teller:
    """What telling a WAIT reads of a worker (worker/status.py `Teller`), from its config:
    the CLI retries without building the node (no transport, no rails)."""

    def __init__(self, store: Store, cfg: WorkerConfig, now: datetime) -> None:
        self.store = store
        self.address = cfg.agent.address.lower()  # as the engine keeps it
        self.domain = cfg.agent.domain
        self.extensions = frozenset[str](cfg.agent.extensions)
        self.clock: Callable[[], datetime] = lambda: now


def retry_job(cfg: WorkerConfig, job_id: str, now: datetime) -> JobAct:
    """Queue a held job again with fresh attempts: the serving worker's runner runs it,
    and its outbox drain sends the `queued` WAIT (when there is one) on its next round."""
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        return retry_held(store, job_id, now, _Teller(store, cfg, now))
    finally:
        store.close()


def _requeued(held: Job, move: JobMove) -> Job:
    """`held` as the requeue `move` leaves it (what its WAIT says and is named by)."""
    rounds = tuple(JobRound.from_doc(d) for d in move.fields["rounds"])
    return replace(held, state=move.to, attempts=0, rounds=rounds, at={move.to: move.now},
                   updated_at=move.now)


def retry_held(store: Store, job_id: str, now: datetime, teller: Teller | None = None) -> JobAct:
    """`retry_job` on an open ledger: the round of attempts the job ends is kept with it
    (`rounds`), so `jobs list` still shows when the first attempt ran and how it ended.
    With `teller` (the worker), a buyer that asked to hear is told `queued` for the new
    round in the move's own commit: a crash neither requeues untold nor tells twice."""
    held = _held(store.job_get(job_id), job_id, "retried")
    move = requeue(held, now)
    told = wait_commit(teller, _requeued(held, move), "queued", now, move) if teller is not None else None
    moved = store.commit_step(told) == "ok" if told is not None else store.job_move(move)
    job = store.job_get(job_id)
    assert job is not None
    return JobAct(job, moved, "" if moved else "the job moved on meanwhile")
