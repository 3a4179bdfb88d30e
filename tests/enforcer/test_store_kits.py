"""The enforcer's store kits (envelopay.testing.send_store, .payment_store) on both
backends, an old database adopted by the one migrator, and the kits able to fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.testing.payment_store import PAYMENT_CHECKS, check_payment_store
from envelopay.testing.send_store import SEND_CHECKS, check_send_store


def _factory(backend: str, where: str) -> object:
    async def make() -> EnforcerStore:
        store: EnforcerStore = SqliteStore(where) if backend == "sqlite" else PostgresStore(where, max_size=6)
        await store.open()
        return store

    return make


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "enf.db")
    return "postgres", str(request.getfixturevalue("pg_dsn"))


async def test_send_store_kit(where: tuple[str, str]) -> None:
    passed = await check_send_store(_factory(*where))  # type: ignore[arg-type]
    assert passed == [c.__name__ for c in SEND_CHECKS]


def _payments(backend: str, where: str) -> object:
    async def make() -> PaymentStore:
        store: EnforcerStore = SqliteStore(where) if backend == "sqlite" else PostgresStore(where, max_size=6)
        await store.open()
        p = PaymentStore(store)
        await p.open()
        return p

    return make


async def test_payment_store_kit(where: tuple[str, str]) -> None:
    passed = await check_payment_store(_payments(*where))  # type: ignore[arg-type]
    assert passed == [c.__name__ for c in PAYMENT_CHECKS]


class _ApprovesAlways(SqliteStore):
    """A store whose approval is no conditional update: the kit must refuse it."""

    async def approve(self, send_id: str, by: str, now: float) -> bool:
        await self.execute_sql("UPDATE enf_sends SET state = 'APPROVED' WHERE id = ?", (send_id,))
        return True


class _SpendsUnchecked(PaymentStore):
    async def take_spend(self, agent_id: str, asset: str, win: str, slot: str, amount: int, cap: int) -> bool:
        return await super().take_spend(agent_id, asset, win, slot, amount, 2**62)


async def test_the_kits_can_fail(tmp_path: Path) -> None:
    async def broken_send() -> EnforcerStore:
        store = _ApprovesAlways(tmp_path / "a.db")
        await store.open()
        return store

    with pytest.raises(AssertionError, match="check_decisions"):
        await check_send_store(broken_send)

    async def broken_spend() -> PaymentStore:
        store = SqliteStore(tmp_path / "b.db")
        await store.open()
        p = _SpendsUnchecked(store)
        await p.open()
        return p

    with pytest.raises(AssertionError, match="check_spend_caps"):
        await check_payment_store(broken_spend)


def _old_schema() -> list[str]:
    """The tables as a release before the migrator left them: the send side's statements
    run at open, and enf_payments as first released (no deliverer, no compacted_at)."""
    from envelopay.enforcer.send import schema as store
    from envelopay.enforcer.spend import schema as payment_store

    first_payments = [
        "\n".join(line for line in stmt.splitlines() if not ("deliverer" in line or "compacted_at" in line))
        for stmt in payment_store.SCHEMA
    ]
    return [*store.SCHEMA, *first_payments]


async def test_an_old_database_is_adopted_in_place(where: tuple[str, str]) -> None:
    backend, dsn = where
    old = ["INSERT INTO enf_agents VALUES ('a1', 'old', 'old@x.test', 'h1', 'ACTIVE', 5, 50, '[]', 1.0)"]
    old.append(
        "INSERT INTO enf_payments (id, agent_id, idem_key, kind, state, code, reason, request, chain, token,"
        " amount, decimals, payee, wallet, wallet_id, message_id, taken, created_at, updated_at) VALUES"
        " ('p1', 'a1', 'k1', 'pay', 'SENT', '', '', '{}', 'c', 'T', 7, 0, 'p@x', 'W', 'w', '<m>', '[]', 1, 1)"
    )
    if backend == "sqlite":
        import sqlite3

        conn = sqlite3.connect(dsn)
        for stmt in _old_schema() + old:
            conn.execute(stmt)
        conn.commit()
        conn.close()
    else:
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as pg:
            for stmt in _old_schema() + old:
                pg.execute(stmt)
    store: EnforcerStore = SqliteStore(dsn) if backend == "sqlite" else PostgresStore(dsn)
    await store.open()
    try:
        p = PaymentStore(store)
        await p.open()
        versions = await store.fetch("SELECT component, version FROM ep_versions ORDER BY 1, 2", ())
        assert [(r["component"], r["version"]) for r in versions] == [
            ("enforcer_send", 1), ("enforcer_send", 2), ("enforcer_send", 3),
            ("enforcer_spend", 1), ("enforcer_spend", 2), ("enforcer_spend", 3),
        ]
        agent = await store.agent_by_token("h1")
        assert agent is not None and agent.name == "old"
        intent = await p.get("p1")
        assert intent is not None and intent.amount == 7 and intent.deliverer is None
        assert await p.take_delivery("p1", 2.0) is False, "SENT: nothing to deliver"
        # The columns step 2 added are written and read.
        await store.execute_sql("UPDATE enf_payments SET compacted_at = 3 WHERE id = 'p1'", ())
        await p.open()  # again: nothing to do
    finally:
        await store.close()
