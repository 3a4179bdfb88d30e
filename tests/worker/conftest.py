"""Fixtures of the job tests: a ledger on each backend. Their helpers are imported by
package name (tests.worker._jobs_kit), as the task handlers in their configs name them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty ledger, once over SQLite and once over PostgreSQL."""
    if request.param == "sqlite":
        s: Store = SqliteStore(tmp_path / "ledger.db")
    else:
        s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=4)
    yield s
    s.close()
