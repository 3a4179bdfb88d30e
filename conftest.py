"""Fixtures shared by every test folder (tests/, rails/*/tests)."""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # imported by the fixture: local chains load only where it is used
    from envelopay.client.demo import DemoWorld

PG_BASE_DSN = os.environ.get("ENVELOPAY_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_dsn() -> Iterator[str]:
    """A DSN on the real PostgreSQL whose search_path is a fresh, private schema.

    Each test gets its own schema so concurrent test runs never see each other."""
    import psycopg

    schema = f"t_{secrets.token_hex(6)}"
    with psycopg.connect(PG_BASE_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{PG_BASE_DSN}?options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(PG_BASE_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
async def demo_world(tmp_path: Path) -> AsyncIterator[DemoWorld]:
    """The demo world (garden, DKIM, SQLite ledger, local chains), set up and torn down."""
    from envelopay.client.demo import DemoWorld

    w = DemoWorld(tmp_path, None)
    await w.setup()
    try:
        yield w
    finally:
        await w.teardown()
