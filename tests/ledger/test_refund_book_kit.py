"""The refunds table's kit (envelopay.testing.check_refund_book) on both ledger backends,
and a book that pays twice failing it by name."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.refunds import RefundBook
from envelopay.ledger.sqlite import SqliteStore
from envelopay.testing import check_refund_book
from envelopay.testing.refunds import REFUND_CHECKS

NAMES = [c.__name__ for c in REFUND_CHECKS]


@pytest.fixture(params=["sqlite", "postgres"])
def books(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    made: list[SqliteStore | PostgresStore] = []

    def factory() -> RefundBook:
        if request.param == "sqlite":  # one database, opened again by each book
            made.append(SqliteStore(tmp_path / "ledger.db"))
        else:
            made.append(PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2))
        return RefundBook(made[-1], now=datetime.now(UTC))

    yield factory
    for s in made:
        s.close()


def test_both_backends_pass_the_refunds_kit(books: Any) -> None:
    assert check_refund_book(books) == NAMES


class PaysTwice(RefundBook):
    """A book whose paid row may be paid again: the guarantee broken."""

    def paid(self, key: str, owner: str, proof: dict[str, Any], tx_id: str | None, now: datetime) -> bool:
        with self.store.write() as x:
            return x.exec("UPDATE ep_refunds SET status = 'paid', proof = ? WHERE refund_key = ?",
                          (self.store.j(proof), key)) == 1


def test_a_book_that_pays_twice_fails_the_kit_by_name(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "ledger.db")
    try:
        with pytest.raises(AssertionError, match="check_once_then_the_first_outcome"):
            check_refund_book(lambda: PaysTwice(store, now=datetime.now(UTC)))
    finally:
        store.close()
