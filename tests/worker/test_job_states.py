"""The job's states as a table (worker/job_states.py): every state is reached from
`queued`, the final ones lead nowhere, a failed job always has a way out, and a move the
table does not name is None."""

from __future__ import annotations

from envelopay.ledger.jobs import JOB_STATES
from envelopay.worker.job_states import FINAL, TRANSITIONS, Event, JobState, move, sources, unsettled


def test_the_table_names_the_ledgers_states_and_reaches_them_all() -> None:
    assert {s.value for s in JobState} == set(JOB_STATES)
    seen, todo = {JobState.QUEUED}, [JobState.QUEUED]
    while todo:
        here = todo.pop()
        for t in TRANSITIONS:
            if t.source is here and t.target not in seen:
                seen.add(t.target)
                todo.append(t.target)
    assert seen == set(JobState)


def test_final_states_lead_nowhere_and_failed_ones_have_a_way_out() -> None:
    assert not [t for t in TRANSITIONS if t.source in FINAL]
    for state in (JobState.FAILED, JobState.HELD, JobState.REFUNDING):
        assert any(t.source is state and t.target is not state for t in TRANSITIONS), state


def test_moves() -> None:
    assert move("queued", Event.CLAIM) is JobState.RUNNING
    assert move("running", Event.FINISH) is JobState.DONE
    assert move("held", Event.RETRY) is JobState.QUEUED
    assert move("done", Event.RETRY) is None  # an answered job never runs again
    assert move("refunded", Event.REFUND) is None  # nor is refunded twice
    assert move("no-such-state", Event.CLAIM) is None
    assert sources(Event.RETRY) == ("running", "held")
    assert unsettled("failed", None) and unsettled("refunding", None)
    assert not unsettled("failed", "<oops@x>") and not unsettled("held", None)
