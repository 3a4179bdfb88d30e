"""The worker console says a flow's job state as `envelopay flows` does (one function,
ledger/jobs.py's flow_state_text): a paid flow whose job is held reads `paid · job held`
in the list and on the flow's page; a flow whose job is done reads its own state only
(SQLite and PostgreSQL)."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tests.node._console_pages import console_pages

from envelopay.client.views import flows_rows
from envelopay.ledger.jobs import JobMove
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, Store
from envelopay.node.console import Console
from envelopay.rails.amounts import no_decimals
from envelopay.testing.store_jobs import sample_job

LOCAL = "worker@held.test"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def paid_flow_with_job(store: Store, n: int, state: str) -> FlowRecord:
    job = sample_job(LOCAL, n)
    at = T0 + timedelta(seconds=n)
    record = FlowRecord(job.flow_id, LOCAL, job.peer, "order", "payee", state, 0, {}, at, at)
    job = replace(job, created_at=at, updated_at=at)
    commit = Commit(LOCAL, at, {"status": "processed"}, flow=FlowWrite(record), job_new=job)
    assert store.commit_step(commit) == "ok"
    return record


def state_shown(html: str, flow_id: str) -> str:
    row = html.split(f"id='flow-{flow_id}'", 1)[1].split("</tr>", 1)[0]
    return str(re.findall(r"<td class='[a-z_]+'>([^<]*)</td>", row)[-1])


async def test_a_held_jobs_flow_reads_as_the_cli_prints_it(store: Store) -> None:
    store.migrate()
    held = paid_flow_with_job(store, 1, "paid")
    done = paid_flow_with_job(store, 2, "fulfilled")
    assert store.job_move(JobMove(sample_job(LOCAL, 1).job_id, ("queued",), "held", T0, {"attempts": 3}))
    assert store.job_move(JobMove(sample_job(LOCAL, 2).job_id, ("queued",), "done", T0))
    cli = {row[0]: row[1] for row in flows_rows([held, done], {held.flow_id: "held", done.flow_id: "done"})}
    assert cli == {held.flow_id: "paid · job held", done.flow_id: "fulfilled"}
    page, shown = await console_pages(Console(store, LOCAL, no_decimals), "", f"/flows/{held.flow_id}")
    assert state_shown(page, held.flow_id) == cli[held.flow_id]
    assert state_shown(page, done.flow_id) == cli[done.flow_id]
    assert "state <b class='paid'>paid · job held</b>" in shown
