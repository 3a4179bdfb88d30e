"""The worker console fits a 1200 px wide window when its rows carry the longest ids a
worker meets (headless Chromium): a refund paid to a peer with a long address by a Solana
transaction (88 characters) with a long key, a job and a flow of long ids. Each long id
wraps inside its cell and keeps its whole value (the text and its title), so it can be
read and copied whole."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests._chromium import chromium
from tests.node._console_pages import console_pages

from envelopay.ledger.jobs import JobMove
from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, LogEntry
from envelopay.node.console import Console, start_console
from envelopay.rails.amounts import no_decimals
from envelopay.testing.store_jobs import sample_job

LOCAL = "worker@wide.test"
PEER = "a-buyer-with-a-rather-long-mailbox-name.and-a-subdomain@procurement.example-enterprise.com"
TX = "5VfydnLu4XwV2H8dZzGpQbQWpCC5HMX6J9sS3LMTR2tqJfqbCrbXZHB7eFqWxBPuE7tdvRzUZh3Km4c9nRq1yFAk"  # a signature
FLOW = "flow_" + "01JD3K8ZQ7X9V2M4N6P8R0T2W4Y6A8C0E2G4J6L8N0Q2S4U6W8"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
WIDE = "document.documentElement.scrollWidth <= document.documentElement.clientWidth"


def wide_ledger(path: Path) -> SqliteStore:
    store = SqliteStore(path)
    job = replace(sample_job(LOCAL), flow_id=FLOW, job_id="job_" + FLOW.removeprefix("flow_"), peer=PEER,
                  task="a_task_with_a_long_descriptive_name", created_at=T0, updated_at=T0)
    record = FlowRecord(FLOW, LOCAL, PEER, "order", "payee", "paid", 0, {}, T0, T0)
    body = {"amount": "250000", "chain": "solana-local", "token": "USDC", "note": TX}
    pay = LogEntry(FLOW, T0, "in", "pay", f"<{TX}@{PEER.split('@')[1]}>", "pay_" + TX[:60], PEER, LOCAL,
                   body, {"status": "ok"})
    commit = Commit(LOCAL, T0, {"status": "processed"}, log=(pay,), flow=FlowWrite(record), job_new=job)
    assert store.commit_step(commit) == "ok"
    error = "RuntimeError: the upstream service at https://api.example.com/v1/very/long/path/x refused"
    assert store.job_move(JobMove(job.job_id, ("queued",), "failed", T0, {"error": error}))
    book = RefundBook(store, now=T0)
    order = RefundOrder(key=f"job:{job.job_id}", local=LOCAL, peer=PEER, flow_id=FLOW, chain="solana-local",
                        token="USDC", amount=250_000, recipient="7" * 44, reason="task_failed")
    _, row = book.claim(order, owner="w1", now=T0, lease_until=T0 + timedelta(seconds=30))
    assert book.paid(order.key, "w1", {"tx": TX}, TX, T0)
    assert row.order.key == order.key and len(TX) == 88
    return store


async def test_the_console_fits_1200_px_with_long_ids(tmp_path: Path) -> None:
    store = wide_ledger(tmp_path / "ledger.db")
    runner, url = await start_console(Console(store, LOCAL, no_decimals), "127.0.0.1", 0)
    try:
        async with chromium() as page:
            await page.call("Emulation.setDeviceMetricsOverride", width=1200, height=900,
                            deviceScaleFactor=1, mobile=False)
            for where in (url, f"{url}/flows/{FLOW}"):
                await page.goto(where)
                assert await page.js(WIDE), (where, await page.js(
                    "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"))
            await page.goto(url)
            refund = await page.js("document.querySelector('#refunds tr.refund-row').innerText")
            # The whole transaction id and peer are on the page (wrapped, not cut) and in titles.
            assert TX in refund and PEER in refund, refund
            for whole in (TX, PEER):
                assert await page.js(f"document.querySelector('#refunds [title=\"{whole}\"]') !== null")
            # Wrapped: the transaction's cell is narrower than its text would be on one line.
            lines = await page.js("(() => { const e = document.querySelector('#refunds code.id');"
                                  " return e.getClientRects().length; })()")
            assert lines > 1, lines
    finally:
        await runner.cleanup()
        store.close()


async def test_a_short_id_stays_whole_and_a_long_one_may_wrap(tmp_path: Path) -> None:
    """Only a long id's cell wraps anywhere: when every id cell did, a row wider than the
    window let the table break short ones too ("word_coun|t", "buyer@garden.loc|al")."""
    store = wide_ledger(tmp_path / "ledger.db")
    short = replace(sample_job(LOCAL), flow_id="flow_short", job_id="job_short", peer="b@x.test",
                    task="word_count", created_at=T0, updated_at=T0)
    record = FlowRecord("flow_short", LOCAL, "b@x.test", "order", "payee", "paid", 0, {}, T0, T0)
    assert store.commit_step(Commit(LOCAL, T0, {"status": "processed"}, flow=FlowWrite(record),
                                    job_new=short)) == "ok"
    (page,) = await console_pages(Console(store, LOCAL, no_decimals), "")
    assert "<td class=''>word_count</td>" in page and "<td class=''>b@x.test</td>" in page
    assert "<td class='id'>a_task_with_a_long_descriptive_name</td>" in page
    assert f"<td class='id'>{PEER}</td>" in page
