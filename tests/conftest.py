"""Fixtures every folder of tests/ sees (pg_dsn and the demo world: ../conftest.py).

The helper modules shared by the rooms' tests sit beside this file and are imported by
their package name (`from tests._engines import worker`), never through sys.path."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """An empty engine ledger, once over SQLite and once over PostgreSQL (a folder's own
    `store` fixture, as tests/enforcer's, overrides this one there)."""
    if request.param == "sqlite":
        s: Store = SqliteStore(tmp_path / "ledger.db")
    else:
        s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=4)  # a job runner beside the test
    yield s
    s.close()
