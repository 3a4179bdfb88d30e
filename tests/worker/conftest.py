"""Fixtures of the worker's tests: the ledger of tests/conftest.py's `store` (both backends)
as our SQL ledger, which the refund book and the job queries need. Their helpers are
imported by package name (tests.worker._jobs_kit), as the task handlers in their configs
name them."""

from __future__ import annotations

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store


@pytest.fixture
def ledger(store: Store) -> SqliteStore | PostgresStore:
    assert isinstance(store, SqliteStore | PostgresStore)
    return store
