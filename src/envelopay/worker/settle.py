"""The seam where a job that failed for good is settled: the failure policy.

The runner moves a job to `failed` (committed), then asks the `FailurePolicy` once for a
`Settlement`, and commits, in one transaction, the job's move to the settlement's state
with the OOPS task_failed it answers (when it answers). A crash between the two leaves
the job `failed` (or `refunding`) with no answer: the runner asks the policy again after
a restart, so a policy must be idempotent (a refund keyed by the job, as
`f"job:{job.job_id}"`). The money side (refunds) plugs in here; until it does,
`AnswerOnly` answers OOPS task_failed and returns nothing, as the worker always did.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from envelopay.ledger.jobs import Job

__all__ = ["AnswerOnly", "FailurePolicy", "Settlement"]


@dataclass(frozen=True, slots=True)
class Settlement:
    """How a failed job ends: its state after settling ("failed": answered, nothing
    returned; "refunded"; "held": waits for the operator), the extension fields of its
    OOPS task_failed (e.g. {"refund": {...}}), whether the OOPS goes now, and job columns
    written with it (`refund`)."""

    state: str = "failed"
    oops: Mapping[str, Any] = field(default_factory=dict)
    answer: bool = True
    fields: Mapping[str, Any] = field(default_factory=dict)
    note: str = ""


class FailurePolicy(Protocol):
    async def on_failed(self, job: Job) -> Settlement:
        """Settle `job` (state failed or refunding, no answer sent yet). Called again for
        the same job after a crash: do nothing twice."""
        ...


class AnswerOnly:
    """No money moves: OOPS task_failed; a `hold` task's job waits for the operator."""

    async def on_failed(self, job: Job) -> Settlement:
        if job.policy == "hold" and job.paid and job.state == "failed":
            return Settlement("held", answer=False)
        return Settlement("failed", note=job.error or "")
