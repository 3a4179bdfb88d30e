"""The console's read-only summaries (envelopay.testing.check_summaries) on both ledger
backends, and a store that miscounts failing the kit by name."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.summaries import FlowCount
from envelopay.testing.summaries import SUMMARY_CHECKS, check_summaries

NAMES = [c.__name__ for c in SUMMARY_CHECKS]


def test_sqlite_summaries(tmp_path: Path) -> None:
    n = itertools.count()
    made: list[SqliteStore] = []

    def factory() -> SqliteStore:
        made.append(SqliteStore(tmp_path / f"ledger{next(n)}.db"))
        return made[-1]

    assert check_summaries(factory) == NAMES
    for s in made:
        s.close()


def test_postgres_summaries(pg_dsn: str) -> None:
    made: list[PostgresStore] = []

    def factory() -> PostgresStore:
        made.append(PostgresStore(pg_dsn, max_size=2))
        return made[-1]

    assert check_summaries(factory) == NAMES
    for s in made:
        s.close()


def test_a_store_that_miscounts_fails_the_kit(tmp_path: Path) -> None:
    class Miscounts(SqliteStore):
        def flow_counts(self, local: str) -> list[FlowCount]:
            return super().flow_counts(local)[1:]

    with pytest.raises(AssertionError, match="check_flow_counts_and_filters"):
        check_summaries(lambda: Miscounts(tmp_path / "m.db"))
