"""Jobs: the paid (or free) work a worker took on, one row per flow, in the ledger.

A job row is written in the same transaction as the step that accepted the work (a
verified PAY, a free or a prepaid ORDER), so a paid job cannot be forgotten; its answer
(FULFILL, or OOPS task_failed) is written in the same transaction as the job's move to
`done` or its settled state, so it goes out at most once. The states and which moves
are legal live in `envelopay.worker.job_states` (pure); the store only applies a move
when the row is in one of the states the caller names (a conditional update), so two
workers racing for one move see one winner.

The table is its own component on the one migrator ("jobs"), so its versions never
collide with the ledger's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from envelopay.persist import Migrations, Step

__all__ = [
    "JOBS_MIGRATIONS", "JOB_COLUMNS", "JOB_STATES", "MOVABLE", "Job", "JobMove", "JobRound",
    "flow_state_text", "job_id_for", "requeue",
]

JOB_STATES = ("queued", "running", "done", "failed", "held", "refunding", "refunded")

# The states a round of attempts may have reached after `queued` (their times go to the
# round's record when the operator queues the job again).
_AFTER_QUEUED = tuple(s for s in JOB_STATES if s != "queued")

# The columns a move may set besides the state and its timestamp.
MOVABLE = frozenset({"error", "result_hash", "answer_id", "refund", "lease_owner", "lease_until", "attempts",
                     "rounds", *(f"{s}_at" for s in _AFTER_QUEUED)})

_TIMES = ", ".join(f"{s}_at {{T}}" for s in JOB_STATES)

_V1 = f"""
CREATE TABLE IF NOT EXISTS ep_jobs (
    job_id TEXT PRIMARY KEY, local TEXT NOT NULL, peer TEXT NOT NULL, flow_id TEXT NOT NULL UNIQUE,
    task TEXT NOT NULL, params {{J}} NOT NULL, order_id TEXT, ref TEXT, message_id TEXT,
    chain TEXT, token TEXT, amount TEXT NOT NULL, payer TEXT, proof {{J}}, proof_key TEXT,
    policy TEXT NOT NULL, idempotent INTEGER NOT NULL,
    state TEXT NOT NULL, attempts INTEGER NOT NULL, lease_owner TEXT, lease_until {{T}},
    error TEXT, result_hash TEXT, answer_id TEXT, refund {{J}},
    created_at {{T}} NOT NULL, updated_at {{T}} NOT NULL, {_TIMES});
CREATE INDEX IF NOT EXISTS ep_jobs_due ON ep_jobs (local, task, state, created_at);
CREATE INDEX IF NOT EXISTS ep_jobs_state ON ep_jobs (state, updated_at)
"""


# v2: the earlier rounds of a job's attempts (`jobs retry` queues a held job again with
# fresh attempts; the round it ends is kept here: its attempts, times and error), a JSON
# list, NULL on rows that were never retried. Nullable: no table rewrite on either backend.
_V2 = "ALTER TABLE ep_jobs ADD COLUMN rounds {J}"


def _sql(dialect: str, sql: str = _V1) -> list[str]:
    t = "TEXT" if dialect == "sqlite" else "TIMESTAMPTZ"
    j = "TEXT" if dialect == "sqlite" else "JSONB"
    text = sql.replace("{T}", t).replace("{J}", j)
    return [s.strip() for s in text.split(";") if s.strip()]


JOBS_MIGRATIONS = Migrations(
    "jobs",
    (Step(1, "jobs: one row per accepted order", {"sqlite": _sql("sqlite"), "postgres": _sql("postgres")}),
     Step(2, "jobs: earlier rounds of attempts",
          {"sqlite": _sql("sqlite", _V2), "postgres": _sql("postgres", _V2)})),
)

JOB_COLUMNS = (
    "job_id, local, peer, flow_id, task, params, order_id, ref, message_id, chain, token, amount, payer,"
    " proof, proof_key, policy, idempotent, state, attempts, lease_owner, lease_until, error, result_hash,"
    " answer_id, refund, created_at, updated_at, rounds, " + ", ".join(f"{s}_at" for s in JOB_STATES)
)


# A job's states its flow's state already says (fulfilled, refunded); any other is said
# beside the flow's, since a held job is no flow state (SPEC.md "Refunds").
_SAID_BY_FLOW = frozenset({"done", "refunded"})


def flow_state_text(state: str, job: str | None) -> str:
    """A flow's state as a person reads it (`flows`, `show`, the worker console): with its
    job's state beside it when the flow's does not say it — `paid · job held`."""
    return state if job is None or job in _SAID_BY_FLOW else f"{state} · job {job}"


def job_id_for(flow_id: str) -> str:
    """One job per flow: its id follows from the flow's, so a redone step writes the same row."""
    return "job_" + flow_id.removeprefix("flow_")


@dataclass(frozen=True, slots=True)
class JobRound:
    """One earlier round of a job's attempts, ended (held) before the operator queued the
    job again: how many attempts it made, when it entered each state, its last error."""

    attempts: int
    at: Mapping[str, datetime]
    error: str | None = None

    def doc(self) -> dict[str, Any]:
        return {"attempts": self.attempts, "error": self.error,
                "at": {state: when.isoformat() for state, when in self.at.items()}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> JobRound:
        at = doc.get("at") or {}
        return cls(int(doc.get("attempts") or 0), {s: datetime.fromisoformat(str(t)) for s, t in at.items()},
                   doc.get("error"))


@dataclass(frozen=True, slots=True)
class Job:
    """One accepted order's work. `amount` is in the asset's smallest units (0: free);
    `payer` is the wallet the verified proof paid from (all three from the verdict)."""

    job_id: str
    local: str
    peer: str
    flow_id: str
    task: str
    params: Mapping[str, Any]
    order_id: str | None
    ref: str | None  # the protocol id of the message that took the work on (PAY or ORDER)
    message_id: str | None  # that message's Message-ID
    chain: str | None
    token: str | None
    amount: int
    payer: str | None
    proof: Mapping[str, Any] | None  # the proof object as the payer presented it
    proof_key: str | None  # its canonical key on the rail (the verdict's)
    policy: str  # "refund" | "hold"
    idempotent: bool
    state: str
    attempts: int
    created_at: datetime
    updated_at: datetime
    lease_owner: str | None = None
    lease_until: datetime | None = None
    error: str | None = None
    result_hash: str | None = None
    answer_id: str | None = None
    refund: Mapping[str, Any] | None = None
    at: Mapping[str, datetime] = field(default_factory=dict)  # state -> when it was entered (this round)
    rounds: tuple[JobRound, ...] = ()  # the earlier rounds, oldest first (`jobs retry`)

    @property
    def paid(self) -> bool:
        return self.amount > 0

    def times(self) -> dict[str, datetime]:
        return dict(self.at)


def requeue(job: Job, now: datetime) -> JobMove:
    """The operator's retry of a held job: queued again with fresh attempts, the round it
    ends kept in `rounds` (its attempts, times and error) and its times after `queued`
    cleared, so this round's times are this round's. Conditional on `held`: a job that
    moved on meanwhile is not touched."""
    ended = JobRound(job.attempts, dict(job.at), job.error)
    fields: dict[str, Any] = {"attempts": 0, "rounds": [r.doc() for r in (*job.rounds, ended)]}
    fields |= {f"{s}_at": None for s in _AFTER_QUEUED}
    return JobMove(job.job_id, ("held",), "queued", now, fields)


@dataclass(frozen=True, slots=True)
class JobMove:
    """Move `job_id` to `to` when its state is one of `from_states` (and, with `owner`,
    when that worker holds its lease); `fields` sets columns of MOVABLE."""

    job_id: str
    from_states: tuple[str, ...]
    to: str
    now: datetime
    fields: Mapping[str, Any] = field(default_factory=dict)
    owner: str | None = None

    def __post_init__(self) -> None:
        unknown = set(self.fields) - MOVABLE
        if unknown:
            raise ValueError(f"a job move cannot set {sorted(unknown)}")
        if self.to not in JOB_STATES or not set(self.from_states) <= set(JOB_STATES):
            raise ValueError(f"unknown job state in {self.from_states} -> {self.to}")
