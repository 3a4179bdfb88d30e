"""Waiting for a proof to become final instead of refusing it at once.

A proof whose verdict is `pending` (found, below the required commitment or depth) or
`unavailable` (the chain cannot be asked) is not judged. Within the chain's window
(`rails.finality.WaitPolicy`) the engine parks the message in the ledger
(`ledger.waiting`): it is neither answered nor spent — its claim stays open, its
(sender, id) and its proof stay held by it — and the node hands it back when it is due
(node/waiting.py). When the window ends, the last verdict is answered as before: the
OOPS (`not_final` / `rail_unavailable`), with the proof released.
"""

from __future__ import annotations

from datetime import datetime

from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import Work
from envelopay.flows import Step
from envelopay.ledger.waiting import WaitingMessage, WaitingStore

__all__ = ["park"]


def park(
    settings: EngineSettings, mail: InboundMail, step: Step, work: Work, now: datetime
) -> Outcome | None:
    """Park the message if its verdict may still change and its window is open: the
    `waiting` Outcome. None: answer now (nothing to wait for, or the window is over)."""
    store, policy, raw, message_id = settings.store, settings.wait, mail.raw, mail.message_id
    local, existed, verdict = settings.address, work.version > 0, work.verdict
    if (policy is None or raw is None or message_id is None or verdict is None or step.proof is None
            or verdict.status not in ("pending", "unavailable") or not isinstance(store, WaitingStore)):
        return None
    before = store.waiting_get(local, message_id)
    first_seen = before.first_seen if before is not None else now
    attempts = (before.attempts if before is not None else 0) + 1
    next_at = policy.next_look(step.proof.chain, first_seen, attempts, now)
    if next_at is None:
        return None
    deadline = first_seen + policy.window(step.proof.chain)
    waiting = WaitingMessage(local, message_id, raw, first_seen, next_at, deadline, attempts, verdict.status,
                        verdict.detail)
    if not store.waiting_put(waiting, worker=settings.worker_id, now=now):
        return Outcome("busy", message_id, detail="claim lost to another worker")
    return Outcome("waiting", message_id, flow_id=work.flow_id if existed else None,
                   state=work.start.state if existed and work.start is not None else None,
                   detail=f"{verdict.status}: {verdict.detail}"[:500], verdict=verdict.to_json(),
                   retry_at=next_at)
