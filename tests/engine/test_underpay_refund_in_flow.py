"""An underpayment paid back is kept in the worker's flow, not only in the OOPS: the flow's
data has the refund (its state unchanged, the INVOICE still open), so `envelopay show FLOW`
and the worker console's refunds show it. Both ledgers; the rails mock kit's chain, and an
application that pays back (the worker's Refunder is tested on real chains elsewhere)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests._engines import worker

from envelopay.engine.unusable import Unusable
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Invoice, Oops
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


class PaysBack(WorkerApp):
    """The mock worker, paying back money it cannot use (RefundsUnusable)."""

    def __init__(self, rail: k.DictRail) -> None:
        super().__init__(rail)
        self.asked: list[Unusable] = []

    async def refund_unusable(self, money: Unusable) -> Mapping[str, Any] | None:
        self.asked.append(money)
        return {"refund": {"chain": money.chain, "token": money.token, "amount": str(money.amount),
                           "wallet": money.payer, "status": "paid", "reason": money.reason,
                           "proof": {"tx": f"back-{money.proof_key}"}}}


async def test_an_underpayment_refund_is_recorded_in_the_workers_flow(store: Store) -> None:
    short = k.PRICE - 10
    rail = k.DictRail({"tu": k.Tx(k.WORKER_WALLET, k.TOKEN, short, payer="W-buyer")})
    app = PaysBack(rail)
    eng = worker(store, rail, app=app)
    o = await eng.handle(k.raw(k.order("ord_u")))
    inv = store.outbox_get(o.outbox[0])
    assert inv is not None and isinstance(inv.outbound.message, Invoice)
    before = store.get_flow(o.flow_id or "")
    assert before is not None and "refund" not in before.data
    pay = k.pay("pay_u", "tu", amount=short, invoice_ref=inv.outbound.message.id)
    p = await eng.handle(k.raw(pay, in_reply_to=inv.outbound.message_id))
    assert p.status == "refused" and p.oops is not None and p.oops.value == "amount_mismatch"
    assert [(m.amount, m.payer) for m in app.asked] == [(short, "W-buyer")]
    oops = store.outbox_get(p.outbox[0])
    assert oops is not None and isinstance(oops.outbound.message, Oops)
    sent = (oops.outbound.message.error.model_extra or {})["refund"] if oops.outbound.message.error else None
    flow = store.get_flow(o.flow_id or "")
    assert flow is not None and flow.state == before.state == "invoiced"  # the INVOICE stays open
    assert flow.data["refund"] == sent and flow.data["refund"]["amount"] == str(short)
    assert flow.data["refund"]["reason"] == "amount_mismatch"
    assert flow.data["invoice"] == before.data["invoice"]  # the rest of the flow as it was
