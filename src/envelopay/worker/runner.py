"""The job runner: takes queued jobs from the ledger and runs them off the event loop.

Per declared task, at most `concurrency` jobs run at once in this process; each attempt
is cut at the task's `time_limit` (envelopay.worker.execute). Jobs are claimed under a
lease that the runner renews while the job runs, so several workers on one PostgreSQL
ledger share the jobs and a job whose worker died is taken over when its lease runs
out: run again when its task is `idempotent`, otherwise failed and settled by its
failure policy.

The answer goes out once. A finished job's FULFILL is written by the engine's send path
(flow `paid`/`ordered`/`prepaid` → `fulfilled`, outbox row) in the same commit as the
job's move `running → done` under this runner's lease; a failed job's OOPS in the same
commit as its settled state. A commit whose job moved on writes nothing.

The runner starts jobs when the engine commits one (`wake`, from the application's
notice) and otherwise polls every `poll` seconds, which also finds other workers' jobs,
expired leases and failed jobs whose settlement a crash interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from envelopay.engine import Engine
from envelopay.errors import StoreError, UsageError
from envelopay.flows.core import with_excess
from envelopay.ledger.jobs import Job, JobMove
from envelopay.ledger.store import Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Fulfill, Oops, OopsError
from envelopay.worker.execute import execute
from envelopay.worker.job_states import TRANSITIONS, Event, JobState, sources, unsettled
from envelopay.worker.settle import AnswerOnly, FailurePolicy
from envelopay.worker.status import tell_job
from envelopay.worker.tasks import TaskBook, TaskError, TaskRequest

__all__ = ["JobRunner", "result_hash", "settle_job"]

_log = logging.getLogger(__name__)
_SCAN_EVERY = 4  # polls between scans for failed jobs left unsettled by a crash
CRASH_RERUNS = 3
UNSETTLED = (JobState.FAILED.value, JobState.REFUNDING.value)  # a failure policy's to settle
# What a settlement may leave a job in: every state the table moves an unsettled job to.
SETTLED = frozenset(t.target.value for t in TRANSITIONS if t.source.value in UNSETTLED)


def result_hash(result: Any) -> str:
    """sha256 of the result as canonical JSON: what the evidence folder checks a FULFILL by."""
    blob = json.dumps(result, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _utcnow() -> datetime:
    return datetime.now(UTC)


async def settle_job(engine: Engine, store: Store, job: Job, policy: FailurePolicy,
                     clock: Callable[[], datetime] = _utcnow) -> Job | None:
    """Settle a failed job once: ask the policy, then commit its state with its OOPS
    task_failed (when it answers) in one transaction. None when another worker settled
    it first (nothing sent twice)."""
    settlement = await policy.on_failed(job)
    if settlement.state not in SETTLED:  # a policy's bug: the job waits for an operator, unsaid
        _log.error("job %s: the failure policy answered state %r; held", job.job_id, settlement.state)
        settlement = replace(settlement, state=JobState.HELD.value, answer=False)
    move = JobMove(job.job_id, UNSETTLED, settlement.state, clock(), dict(settlement.fields))
    if not settlement.answer:
        moved = store.job_get(job.job_id) if store.job_move(move) else None
        if moved is not None and moved.state == "held":
            tell_job(engine, moved, "held")  # a buyer who asked to hear: it waits for an operator
        return moved
    note = settlement.note or job.error or "the task failed"
    body: dict[str, Any] = {
        "note": f"{OopsCode.TASK_FAILED.value}: {note}"[:1000], "id": engine.new_id("oops"),
        # Extension fields (a refund) ride in `error`, whose unknown fields strict peers ignore;
        # the OOPS body itself keeps only the spec's fields.
        "error": OopsError(code=OopsCode.TASK_FAILED.value, **dict(settlement.oops)).model_dump(mode="json"),
        "ref": job.ref,
    }
    oops = Oops.model_validate(body)
    try:
        await engine.send(oops, job.peer, flow_id=job.flow_id, job=move)
    except UsageError as exc:
        _log.info("job %s: %s", job.job_id, exc)
        return None
    return store.job_get(job.job_id)


class JobRunner:
    """Runs the jobs of one address (`engine.address`) for the tasks in `tasks`."""

    def __init__(
        self,
        engine: Engine,
        tasks: TaskBook,
        *,
        policy: FailurePolicy | None = None,
        owner: str | None = None,
        poll: float = 0.5,
        lease: float = 30.0,
        clock: Callable[[], datetime] = _utcnow,
        after_answer: Callable[[], Awaitable[Any]] | None = None,
        grace: float = 10.0,
    ) -> None:
        self.engine = engine
        # Told when an answer is in the outbox (the node drains it at once).
        self.after_answer = after_answer
        # Stopping (SIGTERM, a restart) waits this long for the jobs under way to end;
        # the rest are cut, their leases ended, and taken over as after a crash.
        self.grace = grace
        self.store = engine.store
        self.tasks = tasks
        self.policy = policy or AnswerOnly()
        self.owner = owner or engine.worker_id
        self.poll = poll
        self.lease = timedelta(seconds=lease)
        self.clock = clock
        self._wake = asyncio.Event()
        self._running: dict[str, asyncio.Task[None]] = {}  # job_id -> its attempt
        self._by_task: dict[str, set[str]] = {}
        self._settling: set[str] = set()
        self._threads: dict[str, ThreadPoolExecutor] = {}  # per task, its concurrency wide
        self.started: dict[str, datetime] = {}  # job_id -> when this runner started it (bench)

    def wake(self) -> None:
        """A job was committed: look for work now rather than at the next poll."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        polls = 0
        await asyncio.to_thread(self._end_own_leases)
        try:
            while not stop.is_set():
                self._wake.clear()
                try:
                    if polls % _SCAN_EVERY == 0:
                        await self._settle_unsettled()
                    for job, taken_over in await asyncio.to_thread(self._claim_all):
                        self._start(job, taken_over)
                except StoreError as exc:  # the ledger is away for now: the jobs wait in it
                    _log.warning("job runner: %s; trying again", exc)
                polls += 1
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                await asyncio.wait({waiter, stopper}, timeout=self.poll, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                stopper.cancel()
        finally:
            await self._stop_running()

    async def drain(self) -> None:
        """Wait until every job this runner started has ended (tests, bench)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    # -- claiming
    def _end_own_leases(self) -> None:
        """Starting under an owner that held leases (a restart under a stable worker id):
        nothing of ours runs yet, so those jobs are taken over now, not when the lease ends."""
        for job in self.store.job_list(self.engine.address, ("running",), 1000):
            if job.lease_owner == self.owner:
                self.store.job_renew(job.job_id, self.owner, self.clock() - timedelta(microseconds=1))

    def _claim_all(self) -> list[tuple[Job, bool]]:
        """Claim what fits in each task's free slots (runs in a thread: the ledger blocks)."""
        claimed: list[tuple[Job, bool]] = []
        for name in self.tasks.names():
            declared = self.tasks.get(name)
            assert declared is not None
            free = declared.config.concurrency - len(self._by_task.get(name, ()))
            if free <= 0:
                continue
            now = self.clock()
            until = now + self.lease
            claimed += self.store.job_claim(self.owner, self.engine.address, name, now, until, free)
        return claimed

    def _start(self, job: Job, taken_over: bool) -> None:
        self.started[job.job_id] = self.clock()
        self._by_task.setdefault(job.task, set()).add(job.job_id)
        task = asyncio.get_running_loop().create_task(self._attempt(job, taken_over))
        self._running[job.job_id] = task

        def done(_: asyncio.Task[None]) -> None:
            self._running.pop(job.job_id, None)
            self._by_task.get(job.task, set()).discard(job.job_id)
            self._wake.set()  # a slot is free

        task.add_done_callback(done)

    async def _stop_running(self) -> None:
        """Stopping: let the attempts under way end within `grace`, then cut the rest
        (commands die with their group) and end their leases now, so the next start takes
        them over at once."""
        if self._running and self.grace > 0:
            await asyncio.wait(list(self._running.values()), timeout=self.grace)
        for task in self._running.values():
            task.cancel()
        for job_id in list(self._running):
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.job_renew, job_id, self.owner, self.clock())
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        for pool in self._threads.values():
            pool.shutdown(wait=False, cancel_futures=True)  # a sync handler cannot be stopped

    # -- one attempt
    async def _attempt(self, job: Job, taken_over: bool) -> None:
        try:
            await self._attempt_inner(job, taken_over)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not stop the runner; the lease frees the job
            _log.exception("job %s: the runner failed", job.job_id)

    async def _attempt_inner(self, job: Job, taken_over: bool) -> None:
        declared = self.tasks.get(job.task)
        if declared is None:
            return await self._fail(job, f"task {job.task} is no longer declared")
        cfg = declared.config
        if taken_over and not cfg.idempotent:
            return await self._fail(job, f"task {job.task} stopped mid-run (the worker died); not idempotent")
        # A start cut short by a crash is forgiven CRASH_RERUNS times (an idempotent task
        # runs again); past that the job is failed rather than crash workers forever.
        allowed = cfg.attempts + (CRASH_RERUNS if taken_over else 0)
        if job.attempts > allowed:
            return await self._fail(job, f"task {job.task} used its {allowed} start(s)")
        request = self.tasks.resolve(dict(job.params))
        if isinstance(request, TaskError):
            return await self._fail(job, request.detail)
        if await asyncio.to_thread(tell_job, self.engine, job, "running"):  # worker/status.py
            await self._answered()  # the WAIT goes now, not at the next drain
        out = await self._with_lease(job, request)
        if isinstance(out, TaskError):
            if job.attempts < cfg.attempts:
                retry = JobMove(job.job_id, sources(Event.RETRY), "queued", self.clock(),
                                {"error": out.detail}, owner=self.owner)
                await asyncio.to_thread(self.store.job_move, retry)
                return None
            return await self._fail(job, out.detail)
        return await self._finish(job, out)

    async def _with_lease(self, job: Job, request: TaskRequest) -> Any | TaskError:
        renew = asyncio.ensure_future(self._renew(job))
        cfg = request.task.config
        threads = self._threads.get(cfg.name)
        if threads is None and request.task.handler is not None:
            threads = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix=f"job-{cfg.name}")
            self._threads[cfg.name] = threads
        try:
            return await execute(request, threads)
        finally:
            renew.cancel()

    async def _renew(self, job: Job) -> None:
        while True:
            await asyncio.sleep(self.lease.total_seconds() / 3)
            await asyncio.to_thread(self.store.job_renew, job.job_id, self.owner, self.clock() + self.lease)

    async def _finish(self, job: Job, result: Any) -> None:
        fulfill = Fulfill(id=self.engine.new_id("ful"), order_ref=job.order_id or "", result=result,
                          note=f"{job.task}: done"[:200])
        flow = await asyncio.to_thread(self.store.get_flow, job.flow_id)
        if flow is not None:  # an overpayment's excess paid back is said in the FULFILL
            fulfill = with_excess(fulfill, flow.data)
        move = JobMove(job.job_id, sources(Event.FINISH), JobState.DONE, self.clock(),
                       {"result_hash": result_hash(result)}, owner=self.owner)
        try:
            await self.engine.send(fulfill, job.peer, flow_id=job.flow_id, job=move)
        except UsageError as exc:  # the job moved on (another worker), or the flow refuses
            _log.warning("job %s: FULFILL not sent: %s", job.job_id, exc)
            await self._fail(job, f"the result could not be sent: {exc}"[:200])
            return
        await self._answered()

    async def _answered(self) -> None:
        if self.after_answer is not None:
            try:
                await self.after_answer()
            except Exception:  # delivery has its own retries; the answer is in the outbox
                _log.exception("draining after a job's answer failed")

    # -- failing and settling
    async def _fail(self, job: Job, why: str) -> None:
        move = JobMove(job.job_id, sources(Event.FAIL), "failed", self.clock(), {"error": why[:500]},
                       owner=self.owner)
        if not await asyncio.to_thread(self.store.job_move, move):
            return  # no longer ours: its new owner decides
        failed = await asyncio.to_thread(self.store.job_get, job.job_id)
        if failed is not None:
            await self._settle(failed)

    async def _settle(self, job: Job) -> None:
        if job.job_id in self._settling:
            return
        self._settling.add(job.job_id)
        try:
            settled = await settle_job(self.engine, self.store, job, self.policy, self.clock)
            if settled is not None and settled.answer_id is not None:
                await self._answered()
        except Exception:  # the policy's failure (a rail down): asked again at the next scan
            _log.exception("job %s: settling failed; will ask again", job.job_id)
        finally:
            self._settling.discard(job.job_id)

    async def _settle_unsettled(self) -> None:
        jobs = await asyncio.to_thread(
            partial(self.store.job_list, self.engine.address, ("failed", "refunding"), 100, unanswered=True))
        for job in jobs:
            if unsettled(job.state, job.answer_id) and job.job_id not in self._running:
                await self._settle(job)
