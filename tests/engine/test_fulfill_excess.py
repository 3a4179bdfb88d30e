"""An overpayment's excess the worker paid back is said in its FULFILL (`refund`, walk item
18) and the buyer checks it on the rail, on both ledgers: believed once (the proof reserved
as a refund's is, then spent), kept in the flow as `excess` while the flow is `fulfilled`
either way; `show` lists it ("came back: overpaid"); a transfer that did not pay the buyer,
or one already shown, is kept NOT verified."""

from __future__ import annotations

from typing import Any

from envelopay.client import views as v
from envelopay.engine import Engine
from envelopay.ledger.store import ProofKey, Store
from envelopay.protocol.messages import Fulfill, Order
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

EXCESS = 50_000


def _buyer(store: Store) -> tuple[Engine, k.DictRail]:
    rail = k.DictRail({
        "back": k.Tx(k.BUYER_WALLET, k.TOKEN, EXCESS, payer=k.WORKER_WALLET),
        "elsewhere": k.Tx("W-someone", k.TOKEN, EXCESS, payer=k.WORKER_WALLET),
    })
    buyer = Engine(store, address=k.BUYER, domain="client.test", rails={k.CHAIN: rail},
                   app=WorkerApp(rail, wallet=k.BUYER_WALLET), clock=k.Clock(), id_factory=k.counter_ids("b"))
    return buyer, rail


async def _fulfilled(buyer: Engine, oid: str, tx: str) -> str:
    """Our prepaid ORDER (it paid the price plus the excess), and the worker's FULFILL
    saying the excess went back in transfer `tx`."""
    order = Order(v="0.2.0", id=oid, task={"op": "echo"}, amount=k.PRICE + EXCESS, token=k.TOKEN,
                  chain=k.CHAIN, proof={"tx": f"pay-{oid}"})
    sent = await buyer.send(order, k.WORKER)
    refund: dict[str, Any] = {"chain": k.CHAIN, "token": k.TOKEN, "amount": str(EXCESS),
                              "wallet": k.BUYER_WALLET, "proof": {"tx": tx}, "status": "paid",
                              "reason": "overpaid"}
    ful = Fulfill(id=f"ful_{oid}", order_ref=oid, result={"ok": True}, refund=refund)
    out = await buyer.handle(k.raw(ful, sender=k.WORKER, to=k.BUYER, in_reply_to=sent.message_id))
    assert out.flow_id == sent.flow_id and out.state == "fulfilled", out
    return sent.flow_id


async def test_the_excess_a_fulfill_says_went_back_is_checked_and_shown(store: Store) -> None:
    buyer, _ = _buyer(store)
    flow = await _fulfilled(buyer, "ord_a", "back")
    rec = store.get_flow(flow)
    assert rec is not None and rec.state == "fulfilled"
    assert rec.data["excess"]["verified"] is True and rec.data["excess"]["amount"] == str(EXCESS)
    assert store.proof_status(ProofKey(k.CHAIN, "back")) == "spent"
    [back] = [p for p in v.show_doc(rec, store.flow_log(flow))["payments"] if p["message"] == "refund"]
    assert back["status"] == "came back: overpaid (verified)" and back["amount"] == str(EXCESS)
    [row] = [r for r in v.money_rows(rec, lambda _c, _t: 6) if r[0] == "REFUND overpaid"]
    assert row[3].startswith("0.05") and row[6] == "came back: overpaid (verified)"


async def test_an_excess_not_paid_to_us_or_shown_twice_is_not_believed(store: Store) -> None:
    buyer, _ = _buyer(store)
    wrong = store.get_flow(await _fulfilled(buyer, "ord_w", "elsewhere"))
    assert wrong is not None and wrong.state == "fulfilled" and wrong.data["excess"]["verified"] is False
    assert store.proof_status(ProofKey(k.CHAIN, "elsewhere")) != "spent"  # released: not ours to burn
    await _fulfilled(buyer, "ord_1", "back")
    again = store.get_flow(await _fulfilled(buyer, "ord_2", "back"))  # the same transfer, another flow
    assert again is not None and again.state == "fulfilled"  # the work arrived all the same
    assert again.data["excess"]["verified"] is False
    assert again.data["excess"]["verdict"]["reason"] == "proof_replayed"
