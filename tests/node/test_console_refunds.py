"""The worker console shows paid work that failed and was paid back: the job refunded
with the refund beside what was paid, the refund by status with its transaction, the
OOPS task_failed by code (the refund path of test_refund_jobs: garden, DKIM, SQLite
ledger, LiteSVM and eth-tester, the job runner; the console over the worker's ledger)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from tests.node._console_pages import console_pages
from tests.worker._jobs_kit import Served, failing_jobs, job_in, paid_order

from envelopay.client.demo import PRICE, DemoWorld
from envelopay.node.console import Console
from envelopay.rails.amounts import asset_decimals, human_amount


@pytest.fixture
async def served(demo_world: DemoWorld) -> AsyncIterator[Served]:
    async with failing_jobs(demo_world, ("review", "refund")) as served:
        yield served


async def test_the_console_shows_the_refunded_job_and_its_refund(served: Served) -> None:
    w = served.w
    flow, _ = await paid_order(w, "review", "solana-local")
    job = await job_in(w, flow, "refunded")
    node = w.worker
    console = Console(node.store, node.address, asset_decimals(node.engine.rails))
    page, shown = await console_pages(console, "", f"/flows/{flow}")
    paid = f"{human_amount(PRICE, 6)} USDC"
    assert "id='jobs-refunded'>1<" in page and f"id='job-{job.job_id}'" in page
    row = page.split(f"id='job-{job.job_id}'", 1)[1].split("</tr>", 1)[0]
    assert row.count(paid) == 2 and f"({PRICE} units)" in row and "refunded" in row  # paid, paid back
    assert "id='refunds-paid'>paid 1<" in page and "task_failed" in page
    refund = page.split("<table id='refunds'>", 1)[1].split("</table>", 1)[0]
    [made] = node.store.recent_refunds(node.address)
    assert made.tx_id and made.tx_id in refund and paid in refund and "task_failed" in refund
    assert "id='oops-task_failed'" in page
    assert "OOPS" in shown and "task_failed" in shown and "PAY" in shown
