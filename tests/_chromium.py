"""A small Chrome DevTools Protocol driver for headless Debian Chromium: navigate, read
the DOM, click/type with real input events (Input.dispatchMouseEvent / insertText), and
take a screenshot of the page. The one driver of every console's tests (the enforcer's
and the worker's)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--remote-debugging-port=0",
]


class Page:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.loads = 0
        self.loaded = asyncio.Condition()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for raw in self.ws:
            msg = json.loads(raw)
            if "id" in msg and msg["id"] in self.pending:
                fut = self.pending.pop(msg["id"])
                if "error" in msg:
                    fut.set_exception(RuntimeError(str(msg["error"])))
                else:
                    fut.set_result(msg.get("result", {}))
            elif msg.get("method") == "Page.loadEventFired":
                async with self.loaded:
                    self.loads += 1
                    self.loaded.notify_all()

    async def call(self, method: str, **params: Any) -> Any:
        i = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[i] = fut
        await self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        return await asyncio.wait_for(fut, 60)

    async def _until_load(self, before: int) -> None:
        async with self.loaded:
            await asyncio.wait_for(self.loaded.wait_for(lambda: self.loads > before), 60)

    async def goto(self, url: str) -> None:
        before = self.loads
        await self.call("Page.navigate", url=url)
        await self._until_load(before)

    async def js(self, expression: str) -> Any:
        res = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return res["result"].get("value")

    async def text(self) -> str:
        return str(await self.js("document.body.innerText"))

    async def click(self, selector: str, *, navigates: bool = True) -> None:
        """A real mouse click at the centre of the element (pressed and released)."""
        box = await self.js(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView(); const r = e.getBoundingClientRect();"
            " return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()"
        )
        if box is None:
            raise AssertionError(f"no element {selector} on the page:\n{await self.text()}")
        before = self.loads
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box["x"], y=box["y"],
                            button="left", clickCount=1)
        if navigates:
            await self._until_load(before)

    async def type(self, selector: str, text: str) -> None:
        await self.click(selector, navigates=False)
        await self.call("Input.insertText", text=text)

    async def until(self, expression: str, what: str, timeout: float = 30) -> None:
        """Wait until `expression` is true in the page (a live update, say)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not await self.js(expression):
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}:\n{await self.text()}")
            await asyncio.sleep(0.1)

    async def screenshot(self, out: Path, width: int = 1200) -> None:
        """A PNG of the whole page, `width` CSS pixels wide."""
        for height in (400, None):  # lay out at the width first, then as tall as the page
            if height is None:
                height = int(await self.js("document.documentElement.scrollHeight"))
            await self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                            deviceScaleFactor=1, mobile=False)
        shot = await self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        out.write_bytes(base64.b64decode(shot["data"]))

    async def drawn(self, out: Path, selectors: list[str], width: int = 1200) -> bytes:
        """A whole-page PNG (`screenshot`) in which each of `selectors` is drawn: a box with
        height, inside the page. Returns the PNG's bytes."""
        await self.screenshot(out, width)
        height = await self.js("document.documentElement.scrollHeight")
        for sel in selectors:
            box = await self.js(f"(() => {{ const e = document.querySelector({json.dumps(sel)});"
                                " if (!e) return null; const r = e.getBoundingClientRect();"
                                " return {y: r.y + scrollY, h: r.height}; })()")
            assert box is not None, f"{sel} is not on the page:\n{await self.text()}"
            assert box["h"] > 0 and box["y"] + box["h"] <= height, (sel, box, height)
        png = out.read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
        return png


@contextlib.asynccontextmanager
async def chromium() -> AsyncIterator[Page]:
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.Popen(
            ["/usr/bin/chromium", *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: renderers and zygote die with it
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            for _ in range(600):  # wait for the browser to publish its debugging port
                if port_file.exists() and port_file.read_text().count("\n") >= 1:
                    break
                if proc.poll() is not None:
                    raise AssertionError("chromium exited at start")
                await asyncio.sleep(0.05)
            port = int(port_file.read_text().splitlines()[0])
            async with httpx.AsyncClient() as http:
                targets = (await http.get(f"http://127.0.0.1:{port}/json/list")).json()
            page_ws = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with connect(page_ws, max_size=None) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                try:
                    yield page
                finally:
                    page.reader.cancel()
        finally:
            # Chromium's helper processes outlive the browser process and keep writing into
            # the profile; the whole group must be gone before the profile is removed.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
