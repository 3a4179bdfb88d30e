"""One transfer is the refund of one payment only, on both ledgers: the buyer reserves an
OOPS's refund proof as it reserves a PAY's (decide.proof_key_of, the claim), so a worker
that shows the same transfer as the refund of two prepaid ORDERs gets the first believed
(`refunded`, the proof spent) and the second read as the plain OOPS, with why."""

from __future__ import annotations

from envelopay.engine import Engine
from envelopay.ledger.store import ProofKey, Store
from envelopay.protocol.messages import Oops, OopsError, Order
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


def _prepaid(oid: str, tx: str) -> Order:
    return Order(v="0.2.0", id=oid, task={"op": "echo"}, amount=k.PRICE, token=k.TOKEN, chain=k.CHAIN,
                 proof={"tx": tx})


async def test_a_second_oops_citing_the_same_refund_is_the_plain_oops(store: Store) -> None:
    rail = k.DictRail({"back": k.Tx(k.BUYER_WALLET, k.TOKEN, k.PRICE, payer=k.WORKER_WALLET)})
    buyer = Engine(store, address=k.BUYER, domain="client.test", rails={k.CHAIN: rail},
                   app=WorkerApp(rail, wallet=k.BUYER_WALLET), clock=k.Clock(), id_factory=k.counter_ids("b"))
    refund = {"chain": k.CHAIN, "token": k.TOKEN, "amount": str(k.PRICE), "wallet": k.BUYER_WALLET,
              "proof": {"tx": "back"}, "status": "paid", "reason": "task_failed"}
    flows = []
    for oid, tx in (("ord_a", "pa"), ("ord_b", "pb")):
        sent = await buyer.send(_prepaid(oid, tx), k.WORKER)
        assert sent.state == "prepaid"
        oops = Oops(id=f"oops_{oid}", ref=oid, note="task_failed",
                    error=OopsError(code="task_failed", refund=refund))
        out = await buyer.handle(k.raw(oops, sender=k.WORKER, to=k.BUYER, in_reply_to=sent.message_id))
        assert out.flow_id == sent.flow_id, out
        flows.append(sent.flow_id)
    first, second = (store.get_flow(f) for f in flows)
    assert first is not None and first.state == "refunded" and first.data["refund"]["verified"] is True
    assert store.proof_status(ProofKey(k.CHAIN, "back")) == "spent"
    assert second is not None and second.state != "refunded"
    assert second.data["refund"]["verified"] is False
    assert second.data["refund"]["verdict"]["reason"] == "proof_replayed"
