"""Fixtures shared by every test folder (tests/, rails/*/tests)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest

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
