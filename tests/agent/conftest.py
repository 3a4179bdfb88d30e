"""Fixtures shared by the engine tests in this folder (the demo world: ../../conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store

# _refund_tasks, named by the refund tests' task handlers. Loaded before this folder's tests.
_folder = Path(__file__).resolve().parent
if str(_folder) not in sys.path:
    sys.path.insert(0, str(_folder))


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty engine ledger, once over SQLite and once over PostgreSQL."""
    if request.param == "sqlite":
        s: Store = SqliteStore(tmp_path / "ledger.db")
    else:
        s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2)
    yield s
    s.close()
