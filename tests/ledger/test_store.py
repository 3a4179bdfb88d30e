"""The Store contract (envelopay.testing.check_store) on both backends, and migrations."""

from __future__ import annotations

import itertools
from pathlib import Path

import psycopg
import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.schema import LATEST
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import CallRecord, Claim, Commit, Store
from envelopay.testing.store import CHECKS, T0, check_store


def test_sqlite_store_contract(tmp_path: Path) -> None:
    n = itertools.count()
    made: list[Store] = []

    def factory() -> Store:
        store = SqliteStore(tmp_path / f"ledger{next(n)}.db")
        made.append(store)
        return store

    assert check_store(factory) == [c.__name__ for c in CHECKS]
    for s in made:
        s.close()


def test_postgres_store_contract(pg_dsn: str) -> None:
    made: list[PostgresStore] = []

    def factory() -> Store:
        store = PostgresStore(pg_dsn, max_size=2)
        made.append(store)
        return store

    assert check_store(factory) == [c.__name__ for c in CHECKS]
    for s in made:
        s.close()


def test_check_store_can_fail(tmp_path: Path) -> None:
    # A store that forgets spent proofs must fail the kit, naming the check.
    class Forgetful(SqliteStore):
        def proof_status(self, proof):  # type: ignore[no-untyped-def]
            return None

    with pytest.raises(AssertionError, match="check_proof_keys"):
        check_store(lambda: Forgetful(tmp_path / "f.db"))


def _v1_then_upgrade(store_v1: Store, reopen: object) -> None:
    claim = Claim("a@x.test", "<m1>", "h", "w", T0, T0)
    assert store_v1.begin_step(claim).status == "new"
    assert (
        store_v1.commit_step(Commit("a@x.test", T0, {"status": "processed"}, message_id="<m1>", worker="w"))
        == "ok"
    )


def test_sqlite_upgrade_from_v1(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = SqliteStore(path, migrate=False)
    assert old.migrate(target=1) == 1
    _v1_then_upgrade(old, None)
    with pytest.raises(Exception, match="ep_calls"):
        old.call_get("c1")  # v1 has no calls table
    old.close()
    new = SqliteStore(path)  # opening migrates to the latest version
    assert new.version() == LATEST
    assert new.inbound_outcome("a@x.test", "<m1>") == {"status": "processed"}
    new.call_add(CallRecord("c1", "a@x.test", "t@x.test", "<c1>", T0))
    got = new.call_get("c1")
    assert got is not None and got.deadline == T0
    new.close()


def test_postgres_upgrade_from_v1(pg_dsn: str) -> None:
    old = PostgresStore(pg_dsn, migrate=False)
    assert old.migrate(target=1) == 1
    _v1_then_upgrade(old, None)
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        }
    assert "ep_calls" not in tables and "ep_inbound" in tables
    old.close()
    new = PostgresStore(pg_dsn)
    assert new.version() == LATEST
    assert new.migrate() == LATEST
    assert new.inbound_outcome("a@x.test", "<m1>") == {"status": "processed"}
    new.call_add(CallRecord("c1", "a@x.test", "t@x.test", "<c1>", T0))
    got = new.call_get("c1")
    assert got is not None and got.deadline == T0
    with psycopg.connect(pg_dsn) as conn:
        versions = [r[0] for r in conn.execute(
            "SELECT version FROM ep_versions WHERE component = 'ledger' ORDER BY version"
        )]
    assert versions == list(range(1, LATEST + 1))
    new.close()


def test_postgres_portable_path_contract(pg_dsn: str) -> None:
    # The in-Python statement path (used on a database not yet at schema v3) keeps the
    # same contract as the server-side functions.
    made: list[PostgresStore] = []

    def factory() -> Store:
        store = PostgresStore(pg_dsn, max_size=2)
        store._server_steps = False
        made.append(store)
        return store

    assert check_store(factory) == [c.__name__ for c in CHECKS]
    for s in made:
        s.close()
