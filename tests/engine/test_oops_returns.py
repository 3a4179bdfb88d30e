"""An OOPS answering the ACCEPT we sent (issue 15, the payee's side) through the real
path of the demo demo_world: the worker accepts the buyer's OFFER and counter-pays; the buyer
refuses that ACCEPT (its DKIM signature does not verify there); the worker's flow goes
back to `offered` with the counter-payment on record, and a new ACCEPT is accepted."""

from __future__ import annotations

from envelopay.client.demo import BUYER, STEP_TIMEOUT, DemoWorld
from envelopay.client.views import show_doc
from envelopay.protocol.messages import Accept, Give, Offer, Want
from envelopay.rails.binding import PAYER_FIELD, SIG_FIELD


async def test_a_refused_accept_returns_the_accepter_to_offered(demo_world: DemoWorld) -> None:
    async def no_keys(name: str) -> str | None:
        return None  # the worker's key cannot be found: its signature fails, dkim_failed

    verify_dns = demo_world.buyer.dns
    demo_world.buyer.dns = no_keys
    wallet = demo_world.wallets["worker_sol"]
    proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "SOL", 10**9, wallet)
    give = Give(amount=10**9, token="SOL", chain="solana-local", to=wallet, proof=proof)
    want = Want(amount=30_000_000, token="USDC", chain="base-local")
    offer = Offer(id="ofr_r", give=give, want=want, wallet=demo_world.wallets["buyer_base"])
    out, reply, bflow = await demo_world.exchange(offer)
    assert isinstance(reply, Accept) and out.flow_id is not None
    refusal = await demo_world.buyer.wait_outcome(out.outbox[0], STEP_TIMEOUT)
    assert refusal.oops == "dkim_failed" and refusal.outbox
    seen = await demo_world.worker.wait_outcome(refusal.outbox[0], STEP_TIMEOUT)
    assert seen.flow_id == out.flow_id and seen.state == "offered"

    rec = demo_world.worker.store.get_flow(out.flow_id)
    assert rec is not None and rec.state == "offered" and "payment" not in rec.data
    shown = show_doc(rec, demo_world.worker.store.flow_log(out.flow_id))
    assert [(p["id"], p["amount"], p["status"]) for p in shown["payments"]] == [
        (reply.id, "30000000", "refused (dkim_failed)")]
    assert shown["payments"][0]["proof"] == reply.proof

    # The honest retry: a new ACCEPT (the same counter-payment, which the buyer's DKIM
    # refusal did not spend, bound anew to the new presentation by Engine.send) is
    # accepted by the buyer, and the worker's flow is accepted.
    demo_world.buyer.dns = verify_dns
    unbound = {k: v for k, v in reply.proof.items() if k not in (PAYER_FIELD, SIG_FIELD)}
    again = reply.model_copy(update={"id": "acc_again", "proof": unbound})
    sent = await demo_world.worker.send(again, BUYER, flow_id=out.flow_id)
    took = await demo_world.buyer.wait_outcome(sent.message_id, STEP_TIMEOUT)
    assert took.status == "processed", (took.oops, took.detail)
    assert took.state == "accepted" and took.flow_id == bflow
    rec = demo_world.worker.store.get_flow(out.flow_id)
    assert rec is not None and rec.state == "accepted" and rec.data["payment"]["id"] == "acc_again"
    assert len(rec.data["refused"]) == 1


def test_show_says_where_each_payment_stands() -> None:
    """`show`'s payments: refused ones with their code; the current one `paid` when its flow
    expects no answer (a lone PAY, an INVOICE's PAY) or has it, else `awaiting answer`."""
    from datetime import UTC, datetime

    from envelopay.ledger.store import FlowRecord

    pay = {"message": "pay", "id": "pay_2", "chain": "c", "token": "T", "amount": "1", "proof": {"tx": "b"}}
    refused = [{**pay, "id": "pay_1", "oops": "recipient_mismatch"}]
    now = datetime.now(UTC)

    def statuses(kind: str, state: str) -> list[str]:
        rec = FlowRecord(flow_id="f", local="me", peer="them", kind=kind, side="payer", state=state,
                         data={"payment": pay, "refused": refused}, version=1, created_at=now, updated_at=now)
        return [p["status"] for p in show_doc(rec, [])["payments"]]

    assert statuses("order", "paid") == ["refused (recipient_mismatch)", "awaiting answer"]
    assert statuses("order", "fulfilled") == ["refused (recipient_mismatch)", "paid"]
    assert statuses("pay", "paid") == ["refused (recipient_mismatch)", "paid"]
    assert statuses("invoice", "paid") == ["refused (recipient_mismatch)", "paid"]
    assert statuses("exchange", "offered")[-1] == "awaiting answer"
