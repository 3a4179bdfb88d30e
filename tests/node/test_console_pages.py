"""The worker console's flow list in headless Chromium over a ledger with more flows than
a page: paged newest first with the filter kept, filtered by peer and kind with real
typing and clicks, a count that links to its flows, and a flow of another address never
shown."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from tests._chromium import Page, chromium

from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite
from envelopay.node.console import FLOWS_PAGE, Console, start_console
from envelopay.rails.amounts import no_decimals

LOCAL = "worker@pages.test"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def write_flow(store: SqliteStore, n: int, peer: str, kind: str = "order", local: str = LOCAL) -> None:
    at = T0 + timedelta(seconds=n)
    state = "fulfilled" if n % 2 else "invoiced"
    record = FlowRecord(f"flow_{n:03d}", local, peer, kind, "payee", state, 0, {}, at, at)
    assert store.commit_step(Commit(local, at, {"status": "processed"}, flow=FlowWrite(record))) == "ok"


@pytest.fixture
async def console(tmp_path: Path) -> AsyncIterator[str]:
    store = SqliteStore(tmp_path / "ledger.db")
    for n in range(FLOWS_PAGE + 10):  # a page and ten more, from two peers
        write_flow(store, n, "alice@x" if n < FLOWS_PAGE + 5 else "bob@x")
    write_flow(store, 900, "carol@x", kind="exchange")
    write_flow(store, 901, "mallory@x", local="other@pages.test")  # another address's flow
    runner, url = await start_console(Console(store, LOCAL, no_decimals), "127.0.0.1", 0)
    yield url
    await runner.cleanup()
    store.close()


async def ids(page: Page) -> list[str]:
    return [str(i).removeprefix("flow-") for i in
            await page.js("[...document.querySelectorAll('#flows tr[id]')].map(e => e.id)")]


async def test_pages_filters_and_counts_with_real_clicks(console: str) -> None:
    newest = [f"flow_{n:03d}" for n in reversed(range(FLOWS_PAGE + 10))]
    async with chromium() as page:
        await page.goto(console)
        assert await ids(page) == ["flow_900", *newest[:FLOWS_PAGE - 1]]
        assert await page.js("document.querySelector('#flow-total').innerText") == str(FLOWS_PAGE + 11)
        assert "flow_901" not in await page.text() and "mallory" not in await page.text()

        await page.type("#peer", "alice@x")
        await page.type("#kind", "order")
        await page.click("#filter")
        alice = [f for f in newest if int(f[5:]) < FLOWS_PAGE + 5]
        assert await ids(page) == alice[:FLOWS_PAGE]
        await page.click("#older-flows")
        assert await ids(page) == alice[FLOWS_PAGE:]  # no overlap, the filter kept
        assert await page.js("document.querySelector('#peer').value") == "alice@x"
        assert await page.js("document.querySelector('#older-flows') === null")

        await page.click("#clear")
        await page.click("#count-exchange-invoiced a")  # flow_900 is even: invoiced
        assert await ids(page) == ["flow_900"]
        await page.click("#flow-flow_900 a")
        assert "exchange with carol@x" in await page.text()

    async with httpx.AsyncClient() as http:
        other = await http.get(console + "/flows/flow_901")
        assert other.status_code == 200 and "no flow flow_901" in other.text and "mallory" not in other.text
        bad = await http.get(console, params={"peer": "x\x00y"})
        assert "peer: not a peer a flow has" in bad.text
