"""`check_refund_book(factory)`: the refunds table (envelopay.ledger.refunds) as a kit any
backend can run — a refund paid at most once, worked by one owner at a time.

    from envelopay.testing.refunds import check_refund_book
    check_refund_book(lambda: RefundBook(MyStore(...), now=datetime.now(UTC)))

`factory` returns a RefundBook on a migrated store (a new one may share the database of
the last); each check uses keys and an address of its own, so books over one shared
database, and runs after earlier runs, do not see each other's rows. A failed check
raises AssertionError naming it; the names of the checks that passed are returned.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.testing.kit import run_checks

__all__ = ["REFUND_CHECKS", "check_refund_book", "sample_refund"]

T0 = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
LEASE = timedelta(minutes=2)


def sample_refund(name: str, key: str = "job:job_1", amount: int = 10**30 + 7) -> RefundOrder:
    """A refund of its own address `name-<random>@refunds.test` (amounts past 64 bits:
    stored exactly)."""
    local = f"{name}-{secrets.token_hex(4)}@refunds.test"
    return RefundOrder(key=f"{key}:{local}", local=local, peer="buyer@refunds.test", flow_id=f"flow_{local}",
                       chain="solana", token="USDC", amount=amount, recipient="BuyerWallet",
                       reason="task_failed")


def check_once_then_the_first_outcome(factory: Callable[[], RefundBook]) -> None:
    """The first claim is `new`; the row keeps the first ask's terms; once paid, every
    later claim answers `paid` with the same proof, and nothing is worked again."""
    book, order = factory(), sample_refund("once")
    claimed, row = book.claim(order, owner="a", now=T0, lease_until=T0 + LEASE)
    assert claimed == "new" and row.status == "paying" and row.order == order and row.attempts == 1
    assert book.signed(order.key, "a", "tx-1", b"\x00\xffbytes", T0)
    got = book.get(order.key)
    assert got is not None and got.status == "signed" and got.tx_id == "tx-1"
    assert got.signed == b"\x00\xffbytes"
    assert book.paid(order.key, "a", {"tx": "tx-1"}, None, T0)
    bigger = replace(order, amount=order.amount + 1, recipient="Other")
    again, kept = factory().claim(bigger, owner="b", now=T0, lease_until=T0 + LEASE)
    assert again == "paid" and kept.proof == {"tx": "tx-1"} and kept.tx_id == "tx-1"
    assert kept.order.amount == order.amount and kept.order.recipient == "BuyerWallet"
    assert not book.paid(order.key, "b", {"tx": "tx-2"}, "tx-2", T0)  # never a second outcome
    assert not book.failed(order.key, "a", "late", T0)


def check_one_owner_at_a_time(factory: Callable[[], RefundBook]) -> None:
    """A live lease is busy for every other owner, and only its owner moves the row; a
    lease run out (its owner died) or released is taken over."""
    book, order = factory(), sample_refund("owner")
    assert book.claim(order, owner="a", now=T0, lease_until=T0 + LEASE)[0] == "new"
    busy, row = book.claim(order, owner="b", now=T0 + timedelta(seconds=1), lease_until=T0 + LEASE)
    assert busy == "busy" and row.owner == "a"
    assert not book.signed(order.key, "b", "tx-b", b"b", T0)  # not b's to sign
    after = T0 + LEASE + timedelta(seconds=1)
    took, row = book.claim(order, owner="b", now=after, lease_until=after + LEASE)
    assert took == "retake" and row.owner == "b" and row.attempts == 2
    assert not book.signed(order.key, "a", "tx-a", b"a", after)  # a's lease is gone
    book.release(order.key, "b", "sent; the chain says pending", after)
    row2 = book.get(order.key)
    assert row2 is not None and row2.owner is None and row2.error == "sent; the chain says pending"
    assert book.claim(order, owner="c", now=after, lease_until=after + LEASE)[0] == "retake"


def check_failed_moves_nothing_and_may_be_asked_again(factory: Callable[[], RefundBook]) -> None:
    """Failed forgets the signed transaction (it can never land) and the next claim
    works the row again from `paying`."""
    book, order = factory(), sample_refund("failed")
    book.claim(order, owner="a", now=T0, lease_until=T0 + LEASE)
    assert book.signed(order.key, "a", "tx-1", b"x", T0)
    assert book.failed(order.key, "a", "expired: the blockhash is gone", T0)
    row = book.get(order.key)
    assert row is not None and row.status == "failed" and row.tx_id is None and row.signed is None
    assert row.error == "expired: the blockhash is gone" and row.lease_until is None
    claimed, row = book.claim(order, owner="b", now=T0, lease_until=T0 + LEASE)
    assert claimed == "retake" and row.status == "paying" and row.attempts == 2


def check_lists_by_address(factory: Callable[[], RefundBook]) -> None:
    """unsettled: not paid, oldest first; recent: all, newest first; for_flow: the
    flow's; each of one address only."""
    book = factory()
    first = sample_refund("lists", key="pay:solana:p1")
    local = first.local
    orders = [replace(first, key=f"pay:solana:p{n}:{local}", flow_id=f"flow_l_{local}") for n in range(3)]
    for n, o in enumerate(orders):
        at = T0 + timedelta(seconds=n)
        book.claim(o, owner="a", now=at, lease_until=at + LEASE)
    book.paid(orders[1].key, "a", {"tx": "t1"}, "t1", T0)
    book.failed(orders[2].key, "a", "insufficient funds", T0)
    other = sample_refund("lists-other")
    book.claim(other, owner="a", now=T0, lease_until=T0 + LEASE)
    assert [(r.order.key, r.status) for r in book.unsettled(local)] == [
        (orders[0].key, "paying"), (orders[2].key, "failed")]
    assert [r.order.key for r in book.recent(local)] == [o.key for o in reversed(orders)]
    assert [r.order.key for r in book.recent(local, limit=1)] == [orders[2].key]
    assert [r.order.key for r in book.for_flow(f"flow_l_{local}")] == [o.key for o in orders]


def check_tables_open_twice(factory: Callable[[], RefundBook]) -> None:
    """Opening the book again (another process, a restart) applies nothing twice and
    reads what the first wrote."""
    order = sample_refund("reopen")
    factory().claim(order, owner="a", now=T0, lease_until=T0 + LEASE)
    again = factory().get(order.key)
    assert again is not None and again.order == order and again.created_at == T0


REFUND_CHECKS: tuple[Callable[[Callable[[], RefundBook]], None], ...] = (
    check_once_then_the_first_outcome,
    check_one_owner_at_a_time,
    check_failed_moves_nothing_and_may_be_asked_again,
    check_lists_by_address,
    check_tables_open_twice,
)


def check_refund_book(factory: Callable[[], RefundBook]) -> list[str]:
    """Run every refunds check against books made by `factory`; return their names."""
    return run_checks(REFUND_CHECKS, factory)
