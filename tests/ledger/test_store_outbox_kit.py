"""The kit's outbox_claim_one and outbox_claimable checks fail a store that breaks the
claim's rules (the kit itself runs on both backends in test_store.py)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import OutboxRow
from envelopay.testing.store import check_store


class Eager(SqliteStore):
    """Hands out any pending row: no claim, no flow order, no due time."""

    def outbox_claim_one(
        self, message_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> OutboxRow | None:
        row = self.outbox_get(message_id)
        return row if row is not None and row.status == "pending" else None


class Reentrant(SqliteStore):
    """Lets an owner claim again a row it already holds (a drain of its own may be
    sending it)."""

    def outbox_claim_one(
        self, message_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> OutboxRow | None:
        self.outbox_release(message_id, owner)
        return super().outbox_claim_one(message_id, owner, now, lease_until)


class Blind(SqliteStore):
    """Lists no claimable row: a drain asking it first would never send anything."""

    def outbox_claimable(self, owner: str, now: datetime, limit: int) -> list[str]:
        return []


class Unordered(SqliteStore):
    """Lists the claimable rows newest first: a drain with rows of its own in flight
    would stop looking before the first row it may send."""

    def outbox_claimable(self, owner: str, now: datetime, limit: int) -> list[str]:
        return super().outbox_claimable(owner, now, 100_000)[::-1][:limit]


@pytest.mark.parametrize(("broken", "check"), [
    (Eager, "check_outbox_claim_one"), (Reentrant, "check_outbox_claim_one"),
    (Blind, "check_outbox_claimable"), (Unordered, "check_outbox_claimable"),
])
def test_the_kit_fails_a_broken_store(tmp_path: Path, broken: type[SqliteStore], check: str) -> None:
    made: list[SqliteStore] = []

    def factory() -> SqliteStore:
        made.append(broken(tmp_path / f"l{len(made)}.db"))
        return made[-1]

    with pytest.raises(AssertionError, match=check):
        check_store(factory)
    for s in made:
        s.close()
