"""A small JSON-RPC 2.0 server over HTTP/1.1 (keep-alive) on loopback.

The devnet serves its chain nodes with it (a Solana dev node over LiteSVM, the
eth-tester node); tests and benchmarks use it to stand in for a chain node, or to answer
fixture documents after an injected delay. It speaks real
HTTP on a real socket, so the client side (connection pool, parsing, timeouts) runs
exactly as against a remote node. Only asyncio streams; no third-party server.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[str, list[Any]], "Any | Awaitable[Any]"]


class JsonRpcFault(Exception):
    """Raise from a handler to answer with a JSON-RPC error object."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


class JsonRpcServer:
    """`async with JsonRpcServer(handler, delay=0.05) as srv: ... srv.url ...`"""

    def __init__(
        self, handler: Handler, *, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self._handler = handler
        self._delay = delay
        self._host = host
        self._port = port  # 0: a free one
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self.requests = 0
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, self._host, self._port, backlog=1024)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{self._host}:{port}/"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            # Let connection handlers see the closed sockets and end, so no handler is
            # left to be cancelled (and logged) when the loop shuts down.
            if self._tasks:
                _, pending = await asyncio.wait(list(self._tasks), timeout=5)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> JsonRpcServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip() or b"0")
                body = await reader.readexactly(length) if length else b""
                self.requests += 1
                if self._delay:
                    await asyncio.sleep(self._delay)
                payload = await self._answer(body)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(payload)).encode() + b"\r\nConnection: keep-alive\r\n\r\n" + payload)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _answer(self, body: bytes) -> bytes:
        try:
            doc = json.loads(body)
        except ValueError:
            return json.dumps({"jsonrpc": "2.0", "id": None,
                               "error": {"code": -32700, "message": "Parse error"}}).encode()
        if isinstance(doc, list):
            return json.dumps([await self._one(d) for d in doc]).encode()
        return json.dumps(await self._one(doc)).encode()

    async def _one(self, req: Any) -> dict[str, Any]:
        if not isinstance(req, dict) or not isinstance(req.get("method"), str):
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid request"}}
        rid = req.get("id")
        params = req.get("params") or []
        try:
            result = self._handler(req["method"], params if isinstance(params, list) else [params])
            if inspect.isawaitable(result):
                result = await result
        except JsonRpcFault as fault:
            error: dict[str, Any] = {"code": fault.code, "message": fault.message}
            if fault.data is not None:
                error["data"] = fault.data
            return {"jsonrpc": "2.0", "id": rid, "error": error}
        return {"jsonrpc": "2.0", "id": rid, "result": result}


@dataclass
class ServedChain:
    """A dev chain node served in-process (the `RunningChain` a plugin's `DevChain.start`
    returns): its JSON-RPC server and the task that advances its clock; `stop` ends both."""

    url: str
    server: JsonRpcServer
    clock_task: asyncio.Task[None]
    facts: Mapping[str, Any] = field(default_factory=dict)

    async def stop(self) -> None:
        self.clock_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.clock_task
        await self.server.stop()
