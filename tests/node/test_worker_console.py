"""`worker serve --console`: the worker's console in headless Chromium, against a worker
process that served a paid flow through the garden (the devnet's world of
test_worker_serve_says: a Solana dev node on a slot clock, the garden on a Unix socket).

Real page, real clicks: flows by state and a filter, a flow's messages with amounts in
human units and raw units beside them, revenue per day per rail, OOPS by code, jobs and
refunds, a new flow appearing without a reload, and a screenshot holding the revenue and
OOPS sections (ENVELOPAY_WORKER_CONSOLE_PNG=path refreshes docs/worker-console.png)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._chromium import Page, chromium
from tests.node.test_worker_serve_says import BUYER, WORKER, devnet, serve_once, trade

from envelopay.client.buyer import ClientApp, follow
from envelopay.config import load_config
from envelopay.node.agent_node import AgentNode, build_node
from envelopay.node.init import init_agent
from envelopay.protocol.messages import Methods, Which


async def start_worker(wdir: Path) -> tuple[asyncio.subprocess.Process, dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envelopay.cli", "worker", "serve", "-c", "envelopay.toml", "--json",
        "--console", "127.0.0.1:0", cwd=wdir, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 120)
    assert line, f"worker serve ended before it was ready (exit {await proc.wait()})"
    return proc, json.loads(line)


def buyer_node(bdir: Path) -> AgentNode:
    cfg = load_config(bdir / "envelopay.toml")
    solana = cfg.rails["solana"] | {"confirm_timeout": 0}  # the test's slot clock confirms
    cfg = cfg.model_copy(update={"rails": {**cfg.rails, "solana": solana}})
    return build_node(cfg, app=ClientApp({(a.chain, a.token): a.wallet for a in cfg.accept}))


async def rows(page: Page, table: str) -> list[str]:
    return list(await page.js(f"[...document.querySelectorAll('#{table} tr[id]')].map(e => e.id)"))


async def test_the_console_shows_flows_revenue_jobs_and_oops_and_follows_new_flows(tmp_path: Path) -> None:
    async with devnet(tmp_path) as (clock, dirs):
        proc, ready = await start_worker(dirs[WORKER])
        try:
            url = ready["console"]
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/console", url), ready
            buyer = buyer_node(dirs[BUYER])
            try:
                oops, amount = await trade(buyer, clock)
                await _browse(url, buyer, oops, amount, tmp_path)
            finally:
                await buyer.close()
                buyer.store.close()
            async with httpx.AsyncClient() as http:  # a bad page token is a message, not a 500
                bad = await http.get(url, params={"before": "yesterday", "before_id": "x"})
                live = await http.get(url + "/live.json", params={"before": "nope"})
            assert bad.status_code == 200 and "not a page token" in bad.text
            assert live.status_code == 400 and "not a page token" in live.json()["error"]
        finally:
            proc.terminate()
            _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert f"console at {url}" in err.decode()  # said on stderr at start


async def _browse(url: str, buyer: AgentNode, oops: str, amount: int, tmp_path: Path) -> None:
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    async with chromium() as page:
        await page.goto(url)
        # Three flows: the WHICH, the paid ORDER, the ORDER for a task not sold here.
        assert await page.js("document.querySelector('#flow-total').innerText") == "3"
        assert len(await rows(page, "flows")) == 3
        revenue = await page.js("[...document.querySelectorAll('#revenue tr.revenue-row')]"
                                ".map(e => e.innerText)")
        assert len(revenue) == 1, revenue
        assert today in revenue[0] and "solana-local" in revenue[0], revenue
        assert "0.25 USDC" in revenue[0] and str(amount) in revenue[0], revenue
        assert await page.js(f"document.querySelector('#oops-{oops}').innerText") == f"{oops}\t1"
        assert oops in await page.js("document.querySelector('#oops').innerText")
        # Jobs: the paid order became a job, done, with what it was paid in human units.
        await page.until("document.querySelector('#jobs-done')?.innerText === '1'", "the paid job done")
        job = await page.js("document.querySelector('#jobs tr[id]').innerText")
        assert "word_count" in job and "0.25 USDC (250000 units)" in job and "done" in job, job
        assert await page.js("document.querySelector('#no-refunds').innerText") == "No refunds."

        await _screenshot(page, tmp_path / "worker-console.png")

        # The filter, typed and clicked: the fulfilled flow only, then its messages.
        await page.type("#state", "fulfilled")
        await page.click("#filter")
        listed = await rows(page, "flows")
        assert len(listed) == 1, listed
        assert "fulfilled" in await page.js(f"document.querySelector('#{listed[0]}').innerText")
        await page.click(f"#{listed[0]} a")
        text = await page.text()
        for kind in ("ORDER", "INVOICE", "PAY", "FULFILL"):
            assert kind in text, text
        assert "0.25 USDC on solana-local (250000 units)" in text and BUYER in text

        # Live: a new flow appears on the open page without a reload.
        await page.goto(url)
        loads = page.loads
        which = await buyer.send(Which(id="wch_live1"), WORKER)
        assert isinstance((await follow(buyer, which, timeout=60)).message, Methods)
        await page.until("document.querySelector('#flow-total').innerText === '4'", "the fourth flow")
        assert len(await rows(page, "flows")) == 4 and page.loads == loads

        # A count is a link: the flows of that kind and state.
        await page.click("#flow-counts tr[id] a")
        assert "state=" in await page.js("location.search")


async def _screenshot(page: Page, out: Path) -> None:
    """The whole page as a PNG; the revenue and OOPS sections are drawn in it."""
    png = await page.drawn(out, ["#revenue", "#oops-counts", "#flow-counts"])
    if os.environ.get("ENVELOPAY_WORKER_CONSOLE_PNG"):  # to refresh docs/worker-console.png
        Path(os.environ["ENVELOPAY_WORKER_CONSOLE_PNG"]).write_bytes(png)


@pytest.mark.parametrize(("arg", "says"), [
    ("99999", "--console '99999': PORT or HOST:PORT"),
    ("host:", "--console 'host:'"),
    ("12a", "--console '12a'"),
])
def test_a_bad_console_option_is_a_usage_error_before_anything_starts(
    tmp_path: Path, arg: str, says: str
) -> None:
    init_agent(tmp_path, address=WORKER)
    done = serve_once(tmp_path, ["--console", arg])
    assert done.returncode == 2, done
    assert says in done.stderr and "serving" not in done.stderr


def test_a_console_port_in_use_is_the_environment(tmp_path: Path) -> None:
    init_agent(tmp_path, address=WORKER)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = serve_once(tmp_path, ["--metrics", "0", "--console", str(taken.getsockname()[1])])
    assert done.returncode == 3, done
    assert "cannot listen for --console" in done.stderr and "metrics at" in done.stdout
