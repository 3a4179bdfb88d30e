"""A worker served in a background thread for the CLI tests here, the DKIM record line
one agent's config needs for its peer's key, and the garden wiring of an `init` config."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# serve(stop, ready): run until `stop` is set; call `ready` once listening.
Serve = Callable[[asyncio.Event, Callable[[object], None]], Awaitable[None]]


@contextmanager
def served(serve: Serve) -> Iterator[None]:
    """Run `serve` on its own event loop in a daemon thread; enter once it is ready,
    and on leaving set its stop event and wait for the thread."""
    loop = asyncio.new_event_loop()
    stop: asyncio.Event | None = None
    started = threading.Event()

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        await serve(stop, lambda _: started.set())

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert started.wait(60), "worker did not start"
    try:
        yield
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(60)
        loop.close()


def dkim_record(agent_dir: Path, selector: str) -> str:
    """The `[dkim_records]` line publishing the key `envelopay init` wrote in `agent_dir`."""
    txt = (agent_dir / "keys" / "dkim.txt").read_text().strip()
    return f'"{selector}._domainkey.garden.local" = "{txt}"\n'


def wire_garden(cfg: Path, garden: Path, sock: Path, records: str, peers: list[str]) -> None:
    """Point an `init` config at one shared garden (root, socket, the peers it hosts) and
    add the peer's DKIM record."""
    text = cfg.read_text()
    text = text.replace('garden_root = "var/garden"', f'garden_root = "{garden}"\ngarden_socket = "{sock}"\n'
                        f"garden_addresses = {peers!r}".replace("'", '"'))
    text = text.replace("[dkim_records]\n", "[dkim_records]\n" + records)
    cfg.write_text(text)
