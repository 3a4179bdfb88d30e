"""Lanes: serve several messages at once, the messages of one thread one after another.

The Maildir pump (node/runtime.py) hands each message to `Lanes.add` under its thread's
key (`lane_of`). A lane is served one message at a time, in the order they were added
(an ORDER before its PAY, a person's replies in turn); different lanes run concurrently,
at most `width` at once, taking turns one message each so a long thread cannot hold a
slot while others wait. `lane_of` reads only the header block, cheaply: the headers are
outside input, and one it cannot read puts its message in one shared lane (SHARED).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

__all__ = ["SHARED", "Lanes", "lane_of"]

T = TypeVar("T")
SHARED = ""  # the lane of every message whose thread cannot be read from its headers
_HEAD_MAX = 64 * 1024  # a header block longer than this is not read further
_ID = re.compile(rb"<([^<>\s]{1,998})>")  # a msg-id as RFC 5322 3.6.4 writes it, <left@right>
_WANTED = (b"references", b"in-reply-to", b"message-id")


def lane_of(raw: bytes) -> str:
    """The thread a message belongs to: the root Message-ID (the first one References
    names), else the one In-Reply-To names, else the message's own Message-ID. A header
    given twice, or none of the three readable: SHARED. Never raises."""
    try:
        fields = _fields(raw)
    except Exception:  # outside input: whatever it is, the pump goes on (one shared lane)
        return SHARED
    if fields is None:
        return SHARED
    for name in _WANTED:
        value = fields.get(name)
        if value is not None:
            found = _ID.search(value)
            if found is not None:
                return found.group(1).decode("latin-1")
    return SHARED


def _fields(raw: bytes) -> dict[bytes, bytes] | None:
    """The wanted header fields, unfolded (RFC 5322 2.2.3); None if one is given twice."""
    head = raw[:_HEAD_MAX]
    end = head.find(b"\n\n")
    crlf = head.find(b"\r\n\r\n")
    if crlf >= 0 and (end < 0 or crlf < end):
        end = crlf
    lines = (head if end < 0 else head[:end]).replace(b"\r\n", b"\n").split(b"\n")
    fields: dict[bytes, bytes] = {}
    current: bytes | None = None
    for line in lines:
        if line[:1] in (b" ", b"\t"):  # a folded line continues the field above
            if current is not None:
                fields[current] += line
            continue
        name, colon, value = line.partition(b":")
        name = name.strip().lower()
        current = name if colon and name in _WANTED else None
        if current is None:
            continue
        if current in fields:
            return None  # two of one field: which thread it is in is not clear
        fields[current] = value
    return fields


class Lanes(Generic[T]):
    """Run `serve(item)` for each item added, at most `width` at once, the items of one
    key one after another in the order added. `serve` must not raise (the pump's catches
    a consumer's errors); after `stop` is set, no item is started (those left are simply
    dropped: the pump's messages stay in new/ for the next start)."""

    def __init__(self, width: int, serve: Callable[[T], Awaitable[None]], *, stop: asyncio.Event) -> None:
        if width < 1:
            raise ValueError(f"lanes: width must be at least 1, not {width}")
        self.width = width
        self.hold = 4 * width  # items held (running or waiting) before `room` waits
        self._serve = serve
        self._stop = stop
        self._lanes: dict[str, deque[T]] = {}
        self._ready: deque[str] = deque()  # lanes with an item waiting for a slot, in turn
        self._running: dict[str, asyncio.Task[None]] = {}
        self._held = 0
        self._room = asyncio.Event()
        self._closed = False

    @property
    def held(self) -> int:
        return self._held

    def add(self, key: str, item: T) -> None:
        lane = self._lanes.get(key)
        if lane is None:
            self._lanes[key] = deque([item])
            self._ready.append(key)
        else:
            lane.append(item)  # its turn comes when the lane's running item is done
        self._held += 1
        self._start()

    async def room(self, timeout: float) -> bool:
        """Wait up to `timeout` s until fewer than `hold` items are held; whether they are."""
        if self._held < self.hold:
            return True
        self._room.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._room.wait()
        return self._held < self.hold

    async def finish(self) -> None:
        """Wait for the items running now (none is started once `stop` is set)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def cancel(self) -> None:
        """Cancel the items running now and wait until they are gone; start none after."""
        self._closed = True
        for task in self._running.values():
            task.cancel()
        await self.finish()

    def _start(self) -> None:
        while self._ready and len(self._running) < self.width and not self._ending():
            key = self._ready.popleft()
            self._running[key] = asyncio.get_running_loop().create_task(self._turn(key))

    def _ending(self) -> bool:
        return self._closed or self._stop.is_set()

    async def _turn(self, key: str) -> None:
        """One item of lane `key`; then the lane waits for its next turn behind the others."""
        lane = self._lanes[key]
        try:
            await self._serve(lane[0])
        finally:  # served, or cancelled (then left for the next start): never served twice here
            lane.popleft()
            self._held -= 1
            del self._running[key]
            if lane and not self._ending():
                self._ready.append(key)
            else:
                self._held -= len(lane)
                del self._lanes[key]
            self._room.set()
            self._start()
