"""A job's states as a table (pure: no I/O, no clock). The ledger applies a move only
when the row is still in the state the table moves it from (envelopay.ledger.jobs
JobMove), so this table is the one place that says which moves exist.

    queued ──claim──▶ running ──finish──▶ done          (FULFILL, in the same commit)
                        │  ▲
                retry ◀─┘  └─ takeover (a lease that ran out: the worker died)
                        │
                        └──fail──▶ failed ──refund──▶ refunding ──refunded──▶ refunded
                                     │  └──answer──▶ failed (OOPS task_failed sent; nothing to return)
                                     └──hold──▶ held ──retry──▶ queued   (operator)
                                                  └──refund──▶ refunding (operator)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["FINAL", "TRANSITIONS", "Event", "JobState", "Transition", "move", "sources", "unsettled"]


class JobState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    HELD = "held"
    REFUNDING = "refunding"
    REFUNDED = "refunded"


class Event(StrEnum):
    CLAIM = "claim"  # a runner takes a queued job
    TAKEOVER = "takeover"  # a runner takes a running job whose lease ran out
    FINISH = "finish"  # the handler's result is good JSON: FULFILL
    RETRY = "retry"  # an attempt failed with attempts left; or the operator retries a held job
    FAIL = "fail"  # failed for good: raised, time limit, bad result, attempts out, crash (not idempotent)
    ANSWER = "answer"  # settled with an OOPS task_failed and nothing to return
    HOLD = "hold"  # policy `hold`: wait for the operator (or a refund that cannot be made)
    REFUND = "refund"  # the payment goes back (policy `refund`, or the operator)
    REFUNDED = "refunded"  # the refund is paid; OOPS task_failed with it, in the same commit


@dataclass(frozen=True, slots=True)
class Transition:
    source: JobState
    event: Event
    target: JobState


S, E = JobState, Event
TRANSITIONS: tuple[Transition, ...] = (
    Transition(S.QUEUED, E.CLAIM, S.RUNNING),
    Transition(S.RUNNING, E.TAKEOVER, S.RUNNING),
    Transition(S.RUNNING, E.FINISH, S.DONE),
    Transition(S.RUNNING, E.RETRY, S.QUEUED),
    Transition(S.RUNNING, E.FAIL, S.FAILED),
    Transition(S.FAILED, E.ANSWER, S.FAILED),
    Transition(S.FAILED, E.HOLD, S.HELD),
    Transition(S.FAILED, E.REFUND, S.REFUNDING),
    Transition(S.REFUNDING, E.REFUNDED, S.REFUNDED),
    Transition(S.REFUNDING, E.HOLD, S.HELD),
    Transition(S.HELD, E.RETRY, S.QUEUED),
    Transition(S.HELD, E.REFUND, S.REFUNDING),
)

FINAL = frozenset({S.DONE, S.REFUNDED})
_TABLE = {(t.source, t.event): t.target for t in TRANSITIONS}


def move(state: str, event: Event) -> JobState | None:
    """The state `event` takes a job in `state` to, or None when the table has no such move."""
    try:
        return _TABLE.get((JobState(state), event))
    except ValueError:
        return None


def sources(event: Event) -> tuple[str, ...]:
    """Every state `event` may move a job from (a JobMove's from_states)."""
    return tuple(t.source.value for t in TRANSITIONS if t.event is event)


def unsettled(state: str, answer_id: str | None) -> bool:
    """A failed job whose answer has not gone out yet: its failure policy still owes it
    a settlement (after a crash, the runner asks again)."""
    return state in (S.FAILED, S.REFUNDING) and answer_id is None
