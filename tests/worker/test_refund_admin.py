"""The operator's refunds (node/refund_admin.py, `envelopay refunds list|retry`): a refund
for money the worker cannot use (`pay:` key) that failed is listed and, asked again, paid
once on the chain; a job's refund is sent to `jobs refund`, a paid one is not paid again.
Both ledgers, the LiteSVM chain."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from envelopay.devnet.plugins import LocalWorld, dev_chain
from envelopay.errors import UsageError
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.ledger.sqlite import SqliteStore
from envelopay.node.refund_admin import retry_refund_row
from envelopay.rails.registry import make
from envelopay.worker.refunds import Refunder, own_key_payer

USDC = 1_000_000
LOCAL = "worker@garden.local"


def _order(world: LocalWorld, to: str, key: str) -> RefundOrder:
    return RefundOrder(key=key, local=LOCAL, peer="buyer@garden.local", flow_id="flow_1", chain=world.chain,
                       token="USDC", amount=3 * USDC, recipient=to, reason="amount_mismatch")


async def test_a_failed_underpayment_refund_is_listed_and_a_retry_pays_it_once(
    ledger: SqliteStore | PostgresStore,
) -> None:
    world = dev_chain("solana").local()
    worker = world.new_wallet(native=2 * 10**9, usdc=0)  # no USDC yet: the first refund fails
    buyer = world.new_wallet(native=10**9, usdc=0)
    rail: Any = make("solana", world.rail_options(worker.key))
    book = RefundBook(ledger, now=datetime.now(UTC))
    refunder = Refunder(book, own_key_payer({world.chain: rail}, {world.chain: worker.key}), owner="w")
    key = f"pay:{world.chain}:proof-1"
    first = await refunder.refund(_order(world, buyer.address, key))
    assert first.status == "failed"
    assert [(r.order.key, r.status) for r in book.unsettled(LOCAL)] == [(key, "failed")]

    world.fund(worker.address, usdc=5 * USDC)
    again = await retry_refund_row(book, refunder, key)
    assert again.status == "paid" and again.refund is not None and again.refund.proof
    assert world.usdc_balance(buyer.address) == 3 * USDC
    assert book.unsettled(LOCAL) == []
    assert [(r.order.key, r.status) for r in book.recent(LOCAL)] == [(key, "paid")]
    with pytest.raises(UsageError, match="paid already"):
        await retry_refund_row(book, refunder, key)
    assert world.usdc_balance(buyer.address) == 3 * USDC  # never a second transfer


async def test_a_jobs_refund_and_an_unknown_key_are_bad_input(ledger: SqliteStore | PostgresStore) -> None:
    world = dev_chain("solana").local()
    worker = world.new_wallet(native=2 * 10**9, usdc=0)
    rail: Any = make("solana", world.rail_options(worker.key))
    book = RefundBook(ledger, now=datetime.now(UTC))
    refunder = Refunder(book, own_key_payer({world.chain: rail}, {world.chain: worker.key}), owner="w")
    assert (await refunder.refund(_order(world, worker.address, "job:job_9"))).status == "failed"
    with pytest.raises(UsageError, match="envelopay jobs refund job_9"):
        await retry_refund_row(book, refunder, "job:job_9")
    with pytest.raises(UsageError, match="no refund"):
        await retry_refund_row(book, refunder, "pay:solana-local:absent")
