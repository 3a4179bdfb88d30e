"""The worker's console, served for a moment: the pages a test reads from it."""

from __future__ import annotations

import httpx

from envelopay.node.console import Console, start_console


async def console_pages(console: Console, *paths: str) -> list[str]:
    """GET each path ("" is the main page) from `console` served on a free port."""
    runner, url = await start_console(console, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient() as http:
            return [(await http.get(f"{url}{path}")).text for path in paths]
    finally:
        await runner.cleanup()
