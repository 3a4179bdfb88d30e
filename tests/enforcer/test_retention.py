"""Enforcer retention on both stores: finished sends and past counters go, pending and
approved rows stay, caps still hold, and it runs beside live sends."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from envelopay.enforcer.core import Enforcer
from envelopay.enforcer.retention import compact_enforcer
from envelopay.enforcer.store import EnforcerStore
from envelopay.errors import UsageError

from .conftest import Clock, Sink

DAY = 86_400.0


def req(subject: str, to: str = "bob@partner.test") -> dict[str, Any]:
    return {"to": to, "from": "r@agents.test", "subject": subject, "text": subject}


async def _rows(store: EnforcerStore, table: str) -> int:
    return int((await store.execute_sql(f"SELECT count(*) FROM {table}", ()))[0][0])


async def test_finished_sends_and_past_counters_age_out(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    _, tok = await enforcer.create_agent("r", "r@agents.test", allow=("partner.test",), hourly=3, daily=50)
    for i in range(3):
        assert (await enforcer.send(tok, req(f"old {i}"))).status == "sent"
    flagged = await enforcer.send(tok, req("old held", to="x@other.test"))
    rejected = await enforcer.send(tok, req("old refused", to="y@other.test"))
    assert flagged.approval_id and rejected.approval_id
    await enforcer.reject(rejected.approval_id)
    assert await _rows(store, "enf_counters") == 2  # this hour, this day
    clock.now += 30 * DAY
    fresh = await enforcer.send(tok, req("fresh"))
    assert fresh.status == "sent"

    with pytest.raises(UsageError, match="longer than the duplicate window"):
        await compact_enforcer(store, older_than=60, now=clock.now)
    report = await compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=2)
    assert (report.sends, report.counters) == (4, 2)  # 3 sent + 1 rejected; last month's slots
    assert await _rows(store, "enf_counters") == 2  # today's remain
    queue = await enforcer.list_approvals()
    assert [r.id for r in queue] == [flagged.approval_id]  # pending stays, finished ones went
    assert (await enforcer.status(tok, fresh.id or "")).status == "sent"
    # Caps still count from the kept slots: 2 more this hour, then flagged.
    statuses = [(await enforcer.send(tok, req(f"now {i}"))).status for i in range(3)]
    assert statuses == ["sent", "sent", "pending_approval"]
    again = await compact_enforcer(store, older_than=7 * DAY, now=clock.now)
    assert (again.sends, again.counters) == (0, 0)


async def test_compaction_beside_live_sends(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    _, tok = await enforcer.create_agent("r", "r@agents.test", allow=("partner.test",), hourly=500, daily=500)
    for i in range(40):
        await enforcer.send(tok, req(f"old {i}"))
    clock.now += 30 * DAY

    async def live() -> list[str]:
        return [(await enforcer.send(tok, req(f"live {i}"))).status for i in range(20)]

    statuses, report = await asyncio.gather(
        live(), compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=5)
    )
    assert statuses == ["sent"] * 20 and report.sends == 40
    assert len(sink.messages) == 60
    assert await _rows(store, "enf_sends") == 20
