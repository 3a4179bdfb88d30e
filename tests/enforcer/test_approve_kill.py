"""The approve statement itself refuses a killed agent (issue 11, item 8): on both stores
once the kill has committed, and on PostgreSQL also while the kill is still in flight,
where the approval waits for it and then sees KILLED (not its older snapshot's ACTIVE)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from envelopay.enforcer.send.backends import PostgresStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore

from .conftest import Sink

REQ: dict[str, Any] = {"to": "bob@partner.test", "from": "a1@agents.test", "subject": "hello", "text": "hi"}


async def _pending(enforcer: Enforcer) -> str:
    _, token = await enforcer.create_agent("a1", "a1@agents.test", allow=())  # every send queued
    decision = await enforcer.send(token, REQ)
    assert decision.approval_id
    return decision.approval_id


async def _state(store: EnforcerStore, send_id: str) -> str:
    row = await store.get_send(send_id)
    assert row is not None
    return row.state


async def test_the_statement_refuses_an_agent_killed_before_it(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink
) -> None:
    send_id = await _pending(enforcer)
    await store.kill_agent("a1")
    # The store's statement alone (Enforcer.approve checks first; this is what holds when
    # the kill lands between that check and the UPDATE).
    assert await store.approve(send_id, "alice", 1.0) is False
    assert await _state(store, send_id) == "PENDING"
    assert sink.messages == []


async def _approve_against_open_kill(pg_dsn: str, *, commit: bool) -> tuple[bool, str]:
    """Kill a1 in a transaction left open, approve meanwhile, then end the kill."""
    store = PostgresStore(pg_dsn, max_size=4)
    await store.open()
    enforcer = Enforcer(store, None, operator_token_hash="x")  # type: ignore[arg-type]
    try:
        send_id = await _pending(enforcer)
        async with await psycopg.AsyncConnection.connect(pg_dsn) as killer:
            killer_pid = (await (await killer.execute("SELECT pg_backend_pid()")).fetchone() or [0])[0]
            await killer.execute("UPDATE enf_agents SET status = 'KILLED' WHERE name = 'a1'")
            approving = asyncio.create_task(store.approve(send_id, "alice", 1.0))
            # Synchronise on the server's own lock table: the approval is either done (the
            # old statement: it read ACTIVE from its snapshot) or blocked on the killer.
            async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as watch:
                while not approving.done():
                    cur = await watch.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                        (killer_pid,))
                    row = await cur.fetchone()
                    if row and row[0]:
                        break
                    await asyncio.sleep(0.01)
            await (killer.commit() if commit else killer.rollback())
            approved = await approving
        return approved, await _state(store, send_id)
    finally:
        await store.close()


@pytest.mark.parametrize("commit", [True, False], ids=["kill-commits", "kill-rolls-back"])
async def test_on_postgres_an_approval_racing_a_kill_waits_for_it(pg_dsn: str, commit: bool) -> None:
    approved, state = await _approve_against_open_kill(pg_dsn, commit=commit)
    if commit:
        assert (approved, state) == (False, "PENDING")
    else:  # it waited and re-read the agent: ACTIVE after all, so the approval stands
        assert (approved, state) == (True, "APPROVED")
