"""Issue 11: the enforcer's HTTP API under 100,000 hostile inputs (seeded, tests/enforcer/
fuzz_inputs.py), on both stores, with a real aiosmtpd sink behind it.

Requests are raw pipelined HTTP/1.1 bytes, so aiohttp's own request parsing runs for
every one. Most are fed to the real application's protocol handler (aiohttp's
`RequestHandler` from the app's runner) over an in-memory transport, which keeps the run
near a minute; a share goes over a real loopback socket to the running service.

Asserted for every input: HTTP 200 and a well-formed disposition (never a 500, never a
dropped connection); after the run: no cap slot consumed by anything but a delivered
send, nothing logged as an exception."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

import pytest
from aiohttp import web

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.server import build_app

from .conftest import Sink
from .fuzz_inputs import PEER, SENDER, bodies

# 100,000 inputs in all, split between the stores (most are refused before any store
# I/O; the split keeps the run near a minute on a loaded CI machine).
N = {"sqlite": 75_000, "postgres": 25_000}
SCALE = float(os.environ.get("ENVELOPAY_FUZZ_SCALE", "1"))
CONNECTIONS = 4
BATCH = 100
OVER_TCP = 2_000  # of each run, sent over a real socket
_STATUSES = {"sent", "pending_approval", "blocked", "failed"}


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    fields = (ln.partition(":") for ln in lines[1:])
    length = next(int(v) for k, _, v in fields if k.lower() == "content-length")
    return status, await reader.readexactly(length)


class _Wire(asyncio.Transport):
    """An in-memory transport: what aiohttp writes is kept for the test to read."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.grew = asyncio.Event()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data
        self.grew.set()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(name, default)


def _take_response(buf: bytearray) -> tuple[int, bytes] | None:
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
    fields = (ln.partition(":") for ln in lines[1:])
    length = next(int(v) for k, _, v in fields if k.lower() == "content-length")
    if len(buf) < end + 4 + length:
        return None
    body = bytes(buf[end + 4 : end + 4 + length])
    del buf[: end + 4 + length]
    return int(lines[0].split(" ", 2)[1]), body


def _check(
    kind: str, body: bytes, status: int, payload: bytes, seen: dict[str, int], sent_ids: set[str]
) -> None:
    assert status == 200, (status, body[:200], payload[:200])
    answer: Any = json.loads(payload)
    assert answer["status"] in _STATUSES and isinstance(answer.get("reason", ""), str), answer
    if kind == "valid":
        assert answer["status"] in ("sent", "blocked"), (body, answer)  # blocked: a duplicate
    seen[answer["status"]] = seen.get(answer["status"], 0) + 1
    if answer["status"] == "sent":
        sent_ids.add(answer["id"])  # a retry of a fixed Message-ID repeats an id


def _requests(token: str, batch: list[tuple[str, bytes]]) -> bytes:
    prefix = f"POST /v1/send HTTP/1.1\r\nHost: enforcer\r\nAuthorization: Bearer {token}\r\n".encode()
    return b"".join(
        prefix + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        for _, body in batch
    )


async def _in_memory(
    app_server: Any, token: str, work: list[tuple[str, bytes]], seen: dict[str, int], sent_ids: set[str]
) -> None:
    wire = _Wire()
    protocol = app_server()
    protocol.connection_made(wire)
    try:
        for start in range(0, len(work), BATCH):
            batch = work[start : start + BATCH]
            protocol.data_received(_requests(token, batch))
            done = 0
            async with asyncio.timeout(60):
                while done < len(batch):
                    got = _take_response(wire.out)
                    if got is None:
                        assert not wire.closed, "the server closed the connection"
                        wire.grew.clear()
                        await wire.grew.wait()
                        continue
                    _check(*batch[done], *got, seen, sent_ids)
                    done += 1
    finally:
        protocol.connection_lost(None)


async def _worker(
    url: str, token: str, work: list[tuple[str, bytes]], seen: dict[str, int], sent_ids: set[str]
) -> None:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=2**20)
    try:
        for start in range(0, len(work), BATCH):
            batch = work[start : start + BATCH]
            writer.write(_requests(token, batch))
            for kind, body in batch:
                status, payload = await _read_response(reader)
                _check(kind, body, status, payload, seen, sent_ids)
    finally:
        writer.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"], indirect=True)
async def test_a_hundred_thousand_hostile_requests(
    enforcer: Enforcer,
    store: EnforcerStore,
    service: str,
    sink: Sink,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    caplog.set_level(logging.ERROR)
    _, token = await enforcer.create_agent("fz", SENDER, allow=(PEER,), hourly=10**9, daily=10**9)
    n = int(N[request.node.callspec.params["store"]] * SCALE)
    work = list(bodies(20261201 + n, n))
    seen: dict[str, int] = {}
    sent_ids: set[str] = set()
    tcp, memory = work[:OVER_TCP], work[OVER_TCP:]
    runner = web.AppRunner(build_app(enforcer), access_log=None)
    await runner.setup()
    try:
        assert runner.server is not None
        server, shares = runner.server, range(CONNECTIONS)
        await asyncio.gather(
            *(_worker(service, token, tcp[i::CONNECTIONS], seen, sent_ids) for i in shares),
            *(_in_memory(server, token, memory[i::CONNECTIONS], seen, sent_ids) for i in shares),
        )
    finally:
        await runner.cleanup()
    assert sum(seen.values()) == n
    rows = await store.execute_sql("SELECT COALESCE(SUM(sends), 0) FROM enf_counters", ())
    # Each delivered send holds one hourly and one daily slot; nothing else holds any.
    assert int(rows[0][0]) == 2 * len(sent_ids) == 2 * len(sink.messages)
    assert seen.get("sent", 0) > 0 and seen.get("pending_approval", 0) > 0 and seen["blocked"] > n // 2
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records[:3]
