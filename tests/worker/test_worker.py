"""The paid worker through the real path: garden, DKIM, SQLite ledger, LiteSVM, eth-tester."""

from __future__ import annotations

import pytest

from envelopay.client.demo import PRICE, WORKER, DemoWorld
from envelopay.protocol.messages import (
    Fulfill,
    Give,
    Invoice,
    Methods,
    Offer,
    Oops,
    Order,
    Pay,
    Want,
    Which,
)


def _code(msg: object) -> str | None:
    if isinstance(msg, Oops) and msg.error is not None:
        return msg.error.code
    return None


async def test_which_prices_the_described_task(demo_world: DemoWorld) -> None:
    _, reply, _ = await demo_world.exchange(Which(id="w1", task={"name": "digest", "text": "x"}))
    assert isinstance(reply, Methods)
    assert reply.which_ref == "w1"
    assert {(r.chain, r.price) for r in reply.rails} == {("solana-local", 0), ("base-local", 0)}
    _, reply, _ = await demo_world.exchange(Which(id="w2"))
    assert isinstance(reply, Methods)
    assert all(r.price == PRICE for r in reply.rails)  # the cheapest paid task, indicatively


@pytest.mark.parametrize(
    ("task", "code"),
    [
        ({"name": "shell", "cmd": "rm -rf /"}, "unknown_task"),
        ({"name": "envelopay.worker.operations:word_count", "text": "x"}, "unknown_task"),
        ({"name": "word_count"}, "invalid_field"),
        ({"name": "word_count", "text": "x", "code": "__import__('os')"}, "invalid_field"),
        ({"name": "word_count", "text": "x", "rail": "ethereum/DAI"}, "unsupported_rail"),
    ],
)
async def test_bad_orders_get_structured_oops(
    demo_world: DemoWorld, task: dict[str, object], code: str
) -> None:
    out, reply, _ = await demo_world.exchange(Order(id="o1", task=task))
    assert _code(reply) == code
    assert out.oops is not None and out.oops.value == code


async def test_free_task_is_fulfilled_at_once_and_threaded(demo_world: DemoWorld) -> None:
    sent = await demo_world.buyer.send(Order(id="o2", task={"name": "digest", "text": "abc"}), WORKER)
    out = await demo_world.worker.wait_outcome(sent.message_id, 30)
    reply_row = demo_world.worker.store.outbox_get(out.outbox[0])
    assert reply_row is not None
    reply = reply_row.outbound
    assert isinstance(reply.message, Fulfill)
    assert reply.message.result == {
        "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    }
    assert reply.in_reply_to == sent.message_id  # threaded to the ORDER
    assert sent.message_id in reply.references


async def test_pay_to_invoice_fulfils_on_base(demo_world: DemoWorld) -> None:
    task = {"name": "word_count", "text": "a b c", "rail": "base-local/USDC"}
    out, inv, bflow = await demo_world.exchange(Order(id="o3", task=task))
    assert isinstance(inv, Invoice) and inv.chain == "base-local" and inv.amount == PRICE
    proof = await demo_world.pay(demo_world.buyer_rails, inv.chain, "USDC", inv.amount, inv.wallet)
    pay = Pay(id="p3", amount=inv.amount, token="USDC", chain=inv.chain, proof=proof, invoice_ref=inv.id)
    out, reply, _ = await demo_world.exchange(pay, flow_id=bflow)
    assert isinstance(reply, Fulfill) and reply.order_ref == "o3"
    assert reply.result == {"words": 3, "characters": 5}
    log = demo_world.worker.store.flow_log(out.flow_id or "")
    assert [(e.direction, e.type) for e in log] == [
        ("in", "order"), ("out", "invoice"), ("in", "pay"), ("out", "fulfill")
    ]
    assert log[2].verdict is not None and log[2].verdict["status"] == "ok"


async def test_prepaid_order_v02(demo_world: DemoWorld) -> None:
    wallet = demo_world.wallets["worker_sol"]
    proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "USDC", PRICE, wallet)
    order = Order(v="0.2.0", id="o4", task={"name": "word_count", "text": "prepaid work"},
                  amount=PRICE, token="USDC", chain="solana-local", proof=proof)
    _, reply, _ = await demo_world.exchange(order)
    assert isinstance(reply, Fulfill) and reply.result == {"words": 2, "characters": 12}
    short = await demo_world.pay(demo_world.buyer_rails, "solana-local", "USDC", PRICE - 1, wallet)
    cheap = Order(v="0.2.0", id="o5", task={"name": "word_count", "text": "underpaid"},
                  amount=PRICE - 1, token="USDC", chain="solana-local", proof=short)
    _, reply, _ = await demo_world.exchange(cheap)
    assert _code(reply) == "amount_mismatch"


async def test_offer_above_the_rate_is_refused_and_nothing_paid(demo_world: DemoWorld) -> None:
    wallet = demo_world.wallets["worker_sol"]
    before = demo_world.base.usdc_balance(demo_world.wallets["buyer_base"])
    proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "SOL", 10**8, wallet)  # 0.1 SOL
    offer = Offer(
        id="of2",
        give=Give(amount=10**8, token="SOL", chain="solana-local", to=wallet, proof=proof),
        want=Want(amount=30_000_000, token="USDC", chain="base-local"),  # 30 USDC for 0.1 SOL
        wallet=demo_world.wallets["buyer_base"],
    )
    _, reply, _ = await demo_world.exchange(offer)
    assert _code(reply) == "amount_mismatch"
    assert demo_world.base.usdc_balance(demo_world.wallets["buyer_base"]) == before


async def test_deferred_message_stays_in_the_maildir(demo_world: DemoWorld) -> None:
    """A DKIM key lookup that fails for now defers a proof-carrying message: it is not
    answered, not marked done, and is still in new/ for a later attempt."""
    import asyncio

    async def dns_down(name: str) -> str | None:
        raise OSError("resolver unreachable")

    demo_world.worker.dns = dns_down
    demo_world.worker.retry_delays = (0.0,)
    wallet = demo_world.wallets["worker_sol"]
    proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "USDC", PRICE, wallet)
    pay = Pay(id="p-def", amount=PRICE, token="USDC", chain="solana-local", proof=proof)
    before = demo_world.worker.received
    from envelopay import dkim
    from envelopay.client.demo import BUYER, DOMAIN
    from envelopay.mail.garden import deliver
    from envelopay.protocol.compose import compose_message

    raw, mid = compose_message(pay, sender=BUYER, recipient=WORKER, domain=DOMAIN, now=demo_world.clock())
    await deliver(dkim.sign(raw, selector="buyer", domain=DOMAIN, key=demo_world.buyer_key), BUYER, [WORKER],
                  demo_world.garden.endpoint, auth=(BUYER, demo_world.secrets[BUYER]))
    async with asyncio.timeout(30):
        while not any(o.message_id == mid for o in demo_world.worker.outcomes_since(before)):
            await asyncio.sleep(0.02)
    seen = [o for o in demo_world.worker.outcomes_since(before) if o.message_id == mid]
    assert [o.status for o in seen] == ["deferred"]
    assert not seen[0].outbox
    new = list((demo_world.garden.maildir(WORKER) / "new").iterdir())
    assert len(new) == 1 and mid.encode() in new[0].read_bytes()


async def test_reply_committed_before_a_crash_is_sent_on_the_next_drain(demo_world: DemoWorld) -> None:
    """The engine commits the reply to the outbox before anything is sent; a process
    that dies right after still has it, and the next drain sends those same bytes."""
    from envelopay import dkim
    from envelopay.client.demo import BUYER, DOMAIN
    from envelopay.protocol.compose import compose, compose_message

    raw, _ = compose_message(Which(id="w-crash"), sender=BUYER, recipient=WORKER, domain=DOMAIN,
                             now=demo_world.clock())
    signed = dkim.sign(raw, selector="buyer", domain=DOMAIN, key=demo_world.buyer_key)
    verdict = await demo_world.worker.verify_dkim(signed)
    out = await demo_world.worker.engine.handle(signed, dkim=verdict)  # no drain
    pending = demo_world.worker.store.outbox_pending(demo_world.clock())
    assert [r.outbound.message_id for r in pending] == list(out.outbox)
    expected = compose(pending[0].outbound)
    rep = await demo_world.worker.drain()  # what the restarted worker's retry loop does
    assert rep.sent == list(out.outbox)
    await demo_world.buyer.wait_outcome(out.outbox[0], 30)
    assert compose(demo_world.worker.store.outbox_get(out.outbox[0]).outbound) == expected  # type: ignore[union-attr]


async def test_offer_redo_after_a_crash_does_not_pay_twice(demo_world: DemoWorld) -> None:
    """The engine may ask about the same OFFER again (a crash between the rail payment
    and its commit): the recorded ACCEPT comes back, and the buyer was paid once."""
    from datetime import UTC, datetime

    from envelopay.engine import Context, Refuse
    from envelopay.flows import FlowKind

    app = demo_world.worker.engine.app
    wallet = demo_world.wallets["worker_sol"]
    proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "SOL", 10**9, wallet)
    offer = Offer(id="of-redo",
                  give=Give(amount=10**9, token="SOL", chain="solana-local", to=wallet, proof=proof),
                  want=Want(amount=30_000_000, token="USDC", chain="base-local"),
                  wallet=demo_world.wallets["buyer_base"])
    ctx = Context(local=WORKER, peer="buyer@garden.local", flow_id="f", kind=FlowKind.EXCHANGE,
                  state="offered", data={}, now=datetime.now(UTC), new_id=lambda p: f"{p}_x")
    before = demo_world.base.usdc_balance(demo_world.wallets["buyer_base"])
    first = await app.offer(offer, ctx)
    again = await app.offer(offer, ctx)
    assert first is not None and again is not None
    assert first.type == "accept" and again == first  # same id, same proof
    assert demo_world.base.usdc_balance(demo_world.wallets["buyer_base"]) - before == 30_000_000  # paid once
    # A payment that started and never finished is in doubt: refused, never paid again.
    book = app.app.counterpayments
    assert book.begin("buyer@garden.local", "of-doubt") == ("new", None)
    doubt = offer.model_copy(update={"id": "of-doubt"})
    refused = await app.offer(doubt, ctx)
    assert isinstance(refused, Refuse) and refused.code.value == "rail_unavailable"
    assert demo_world.base.usdc_balance(demo_world.wallets["buyer_base"]) - before == 30_000_000
