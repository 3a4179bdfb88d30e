"""Amounts a person reads carry their decimals (issue 30 item 3): the worker's INVOICE
subject and note, its FULFILL and ACCEPT notes say `0.25 USDC`, from the rails' asset
registry, while the JSON keeps its smallest-unit strings. Real path: garden, DKIM, SQLite
ledger, LiteSVM and eth-tester (the demo world)."""

from __future__ import annotations

import json

from envelopay.client.demo import PRICE, DemoWorld
from envelopay.client.preflight import accepts_pair, exchange_query
from envelopay.protocol.compose import compose, message_json
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Methods,
    Offer,
    Order,
    Pay,
    Want,
    Which,
)
from envelopay.protocol.parse import parse


async def test_invoice_and_fulfill_read_in_the_assets_units(demo_world: DemoWorld) -> None:
    assert PRICE == 250_000  # 0.25 USDC: USDC has 6 decimals on both local chains
    task = {"name": "word_count", "text": "a b c", "rail": "solana-local/USDC"}
    out, inv, bflow = await demo_world.exchange(Order(id="o_amt", task=task))
    assert isinstance(inv, Invoice)
    assert inv.note == "word_count: 0.25 USDC on solana-local"
    assert json.loads(message_json(inv))["amount"] == "250000"  # the JSON keeps smallest units
    row = demo_world.worker.store.outbox_get(out.outbox[0])
    assert row is not None
    assert parse(compose(row.outbound)).subject == "INVOICE | word_count: 0.25 USDC on solana-local"

    proof = await demo_world.pay(demo_world.buyer_rails, inv.chain, "USDC", inv.amount, inv.wallet)
    pay = Pay(id="p_amt", amount=inv.amount, token="USDC", chain=inv.chain, proof=proof, invoice_ref=inv.id)
    _, ful, _ = await demo_world.exchange(pay, flow_id=bflow)
    assert isinstance(ful, Fulfill)
    assert ful.note == "Paid 0.25 USDC; here is the result"


async def test_accept_note_reads_in_the_assets_units(demo_world: DemoWorld) -> None:
    give_amount, want_amount = 1_000_000_000, 30_000_000  # 1 SOL (9 decimals), 30 USDC (6)
    proof = await demo_world.pay(
        demo_world.buyer_rails, "solana-local", "SOL", give_amount, demo_world.wallets["worker_sol"]
    )
    offer = Offer(
        id="ofr_amt",
        give=Give(amount=give_amount, token="SOL", chain="solana-local", to=demo_world.wallets["worker_sol"],
                  proof=proof),
        want=Want(amount=want_amount, token="USDC", chain="base-local"),
        wallet=demo_world.wallets["buyer_base"],
    )
    _, acc, _ = await demo_world.exchange(offer)
    assert isinstance(acc, Accept)
    assert acc.note == "30 USDC sent on base-local"
    assert json.loads(message_json(acc))["amount"] == "30000000"


async def test_the_exchange_rate_note_reads_in_the_assets_units(demo_world: DemoWorld) -> None:
    # The demo worker takes 1 SOL (10**9 lamports) for at most 30 USDC (30,000,000 units).
    give, want = "solana-local/SOL", "base-local/USDC"
    _, methods, _ = await demo_world.exchange(Which(id="wx_amt", task=exchange_query(give, want)))
    assert isinstance(methods, Methods)
    assert methods.note == f"exchange {give} for {want}: at most 30 USDC per 1 SOL"
    # The buyer's check (client.preflight) still reads the note as a yes.
    assert accepts_pair(json.loads(message_json(methods)), give, want) is not None
