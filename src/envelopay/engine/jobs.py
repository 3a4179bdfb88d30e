"""A job row from the step that took the work on (the application answered `Enqueue`).

What a refund needs later is taken here from what the step verified: the rail and
amount the proof paid (the verdict's observed amount), the wallet it paid from, the
proof as presented and its canonical key, and the Message-ID of the mail that paid.
A free ORDER's job has no rail and an amount of 0.
"""

from __future__ import annotations

from datetime import datetime

from envelopay.engine.application import Enqueue
from envelopay.engine.step_facts import Work, order_of
from envelopay.ledger.jobs import Job, job_id_for
from envelopay.protocol.messages import Message, Order, Pay

__all__ = ["job_of"]


def job_of(decision: Enqueue, message: Message, work: Work, message_id: str | None, local: str,
           now: datetime) -> Job:
    verdict = work.verdict
    paid_by: Pay | Order | None = None
    if isinstance(message, Pay) or (isinstance(message, Order) and message.prepaid):
        paid_by = message
    order = message if isinstance(message, Order) else order_of(work.fs.data)
    amount = 0
    if paid_by is not None:
        seen = verdict.observed_amount if verdict is not None else None
        amount = int(seen if seen is not None else (paid_by.amount or 0))
    return Job(
        job_id=job_id_for(work.flow_id), local=local, peer=work.peer, flow_id=work.flow_id,
        task=decision.task, params=dict(decision.params), order_id=order.id if order is not None else None,
        ref=getattr(message, "id", None), message_id=message_id, chain=paid_by.chain if paid_by else None,
        token=paid_by.token if paid_by else None, amount=amount,
        payer=verdict.payer if verdict is not None and paid_by else None,
        proof=dict(paid_by.proof) if paid_by is not None and paid_by.proof is not None else None,
        proof_key=verdict.proof_key if verdict is not None and paid_by else None,
        policy=decision.policy, idempotent=decision.idempotent, state="queued", attempts=0,
        created_at=now, updated_at=now,
    )
