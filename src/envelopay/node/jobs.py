"""The job runner of a served worker: built from the node, so `worker serve` takes every
ORDER on as a job (envelopay.worker.runner) and the mailbox never waits for a handler.

The failure policy is the refunds one when the worker can pay refunds (its rail keys,
or the enforcer: `WorkerApplication.refunder`), else the answer alone (OOPS task_failed).
Answers are drained as soon as they are committed.
"""

from __future__ import annotations

from envelopay.config import WorkerConfig
from envelopay.node.agent_node import AgentNode
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.runner import JobRunner
from envelopay.worker.settle import AnswerOnly, FailurePolicy

__all__ = ["job_runner"]


def job_runner(
    node: AgentNode, cfg: WorkerConfig, *, poll: float = 0.5, lease: float = 30.0
) -> JobRunner | None:
    """A runner for `node`'s declared tasks, with the application switched to jobs; None
    when the node sells nothing (no tasks, or not the worker application)."""
    app = node.engine.app
    if not isinstance(app, WorkerApplication) or not cfg.tasks:
        return None
    refunder = getattr(app, "refunder", None)
    policy: FailurePolicy = RefundOnFailure(refunder) if refunder is not None else AnswerOnly()
    runner = JobRunner(node.engine, app.app.tasks, policy=policy, owner=node.engine.worker_id, poll=poll,
                       lease=lease, after_answer=node.drain)
    app.jobs = True
    app.on_job = lambda _job_id: runner.wake()
    return runner
