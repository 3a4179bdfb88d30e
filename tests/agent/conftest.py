"""Fixtures shared by the engine and worker tests in this folder."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store

if TYPE_CHECKING:  # the demo world (local chains) is imported only by the tests that use it
    from envelopay.client.demo import DemoWorld

# The helper modules the tests here import by name: _engines (this folder) and _kit
# (tests/ledger). Loaded before any test module of this folder is collected.
for _folder in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[1] / "ledger"):
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


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[DemoWorld]:
    """The demo world (garden, DKIM, SQLite ledger, local chains), set up and torn down.
    test_engine.py has its own `world` (two engines on one ledger), which wins there."""
    from envelopay.client.demo import DemoWorld

    w = DemoWorld(tmp_path, None)
    await w.setup()
    try:
        yield w
    finally:
        await w.teardown()
