"""The failure policy that returns the money: a paid job that failed for good is refunded
to the wallet its verified proof paid from (envelopay.worker.settle's seam).

    free job                           → failed: OOPS task_failed, nothing to return
    failed, task policy `hold`         → held: no OOPS yet; the operator refunds or retries
                                         (`envelopay jobs refund JOB`, `jobs retry JOB`)
    failed (policy `refund`), or
    refunding (the operator's choice)  → the refund, keyed `job:<job id>` (at most once):
        paid    → refunded: OOPS task_failed with {"refund": {chain, token, amount, wallet, proof}}
        pending → refunding: no OOPS yet; asked again until the chain or the enforcer answers
        failed  → held: nothing moved (say, the worker's wallet is short); the operator decides

The runner asks again after a crash, so every answer here is idempotent by the refund key.
"""

from __future__ import annotations

from envelopay.ledger.jobs import Job
from envelopay.ledger.refunds import RefundOrder
from envelopay.rails.amounts import amount_text
from envelopay.worker.refunds import Refunder, refund_fields
from envelopay.worker.settle import Settlement

__all__ = ["RefundOnFailure"]


def _order(job: Job) -> RefundOrder | None:
    if not job.paid or job.chain is None or job.token is None or not job.payer:
        return None
    return RefundOrder(
        key=f"job:{job.job_id}", local=job.local, peer=job.peer, flow_id=job.flow_id, chain=job.chain,
        token=job.token, amount=job.amount, recipient=job.payer, reason="task_failed",
    )


class RefundOnFailure:
    """`FailurePolicy`: refund a failed paid job (or hold it, as its task says)."""

    def __init__(self, refunder: Refunder) -> None:
        self.refunder = refunder

    async def on_failed(self, job: Job) -> Settlement:
        why = job.error or "the task failed"
        if not job.paid:
            return Settlement("failed", note=why)
        if job.policy == "hold" and job.state == "failed":
            return Settlement("held", answer=False)
        order = _order(job)
        if order is None:  # no wallet to pay back to (an unbound proof the rail did not name)
            return Settlement("held", answer=False,
                              fields={"refund": {"status": "failed", "error": "no payer wallet known"}})
        if not self.refunder.payer.can_pay(order.chain):
            keyless = {"status": "failed", "error": f"no key to pay on {order.chain}"}
            return Settlement("held", answer=False, fields={"refund": keyless})
        result = await self.refunder.refund(order)
        row = result.refund
        if result.status == "paid" and row is not None:
            extra = refund_fields(row)
            # A person reads the note (the OOPS's subject): the asset's units, `0.25 USDC`.
            amount = amount_text(order.amount, order.token, self.refunder.decimals(order.chain, order.token))
            note = f"{why}; refunded {amount} on {order.chain} to {order.recipient}"
            return Settlement("refunded", oops=extra, fields=extra, note=note[:200])
        body = refund_fields(row, result.status)["refund"] if row is not None else {"status": result.status}
        body["error"] = result.detail[:200]
        if result.status == "pending":
            return Settlement("refunding", answer=False, fields={"refund": body})
        return Settlement("held", answer=False, fields={"refund": body})
