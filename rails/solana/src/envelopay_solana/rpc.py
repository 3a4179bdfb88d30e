"""JSON-RPC transport for the Solana rail (one shared httpx connection pool).

solana-py 0.41 sends its requests through `httpx2`, a separate package that respx
does not intercept and that cannot share our pool; so the rail speaks JSON-RPC with
httpx directly, building transactions with solders/solana-py types. Requests are the
ones solana-py makes: `getTransaction` (jsonParsed, maxSupportedTransactionVersion 0),
`getSignatureStatuses`, `getLatestBlockhash`, `getBalance`, `getTokenAccountBalance`,
`getAccountInfo`, `sendTransaction`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import httpx

from envelopay.errors import TransportError


class RpcError(TransportError):
    """The node answered with a JSON-RPC error object."""

    def __init__(self, code: int | None, message: str, data: Any = None) -> None:
        super().__init__(f"RPC error {code}: {message}")
        self.code = code
        self.message = message
        self.data = data


class _HttpxPoster:
    """POST over httpx. httpcore's pool matches queued requests to connections in
    O(requests x connections) per event, which dominates at ~100 calls in flight, so
    calls are spread round-robin over `shards` small pools (unless a client is given)."""

    def __init__(self, url: str, client: httpx.AsyncClient | None, timeout: float, shards: int) -> None:
        self.url = url
        self._own = client is None
        if client is not None:
            self.clients = [client]
        else:
            limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
            # One TLS context for every shard: each new one loads the CA bundle (about 50 ms
            # here), which made a rail's start 0.6 s.
            tls = httpx.create_ssl_context()
            self.clients = [
                httpx.AsyncClient(timeout=timeout, limits=limits, verify=tls) for _ in range(max(1, shards))
            ]
        self._turn = itertools.count()

    async def post(self, body: bytes) -> tuple[int, bytes]:
        client = self.clients[next(self._turn) % len(self.clients)]
        try:
            resp = await client.post(self.url, content=body, headers=_HEADERS)
        except httpx.HTTPError as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        return resp.status_code, resp.content

    async def warm(self) -> None:
        """Nothing loads on first use here: httpx is imported with this module."""

    async def aclose(self) -> None:
        if self._own:
            for client in self.clients:
                await client.aclose()


class _AiohttpPoster:
    """POST over aiohttp (C-accelerated HTTP parser, one connector): for verifiers that
    keep ~100 calls in flight. The session is made on first use, inside the loop."""

    def __init__(self, url: str, timeout: float, connections: int) -> None:
        self.url = url
        self._timeout = timeout
        self._connections = connections
        self._session: Any = None

    async def warm(self) -> None:
        """Import aiohttp and make the session now (~0.2 s here), not at the first call."""
        self._open()

    def _open(self) -> Any:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                timeout=aiohttp.ClientTimeout(total=self._timeout))
        return self._session

    async def post(self, body: bytes) -> tuple[int, bytes]:
        import aiohttp

        session = self._open()
        try:
            async with session.post(self.url, data=body, headers=_HEADERS) as resp:
                return resp.status, await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


_HEADERS = {"Content-Type": "application/json"}


class SolanaRpc:
    """A minimal async JSON-RPC client bound to one endpoint.

    Calls made in the same event-loop turn travel together as one JSON-RPC batch (up
    to `batch_max`; 1 disables batching): at ~100 verifications in flight, per-request
    HTTP overhead, not the check, is the verifier's cost. A lone call goes as a plain
    request. `transport`: "httpx" (default; shares `client` when given) or "aiohttp"."""

    def __init__(self, url: str, client: httpx.AsyncClient | None = None, *, timeout: float = 10.0,
                 transport: str = "httpx", shards: int = 8, connections: int = 128,
                 batch_max: int = 100) -> None:
        if batch_max < 1:
            raise ValueError("batch_max must be at least 1")
        self.url = url
        self.batch_max = batch_max
        self._poster: _HttpxPoster | _AiohttpPoster
        if transport == "aiohttp":
            self._poster = _AiohttpPoster(url, timeout, connections)
        elif transport == "httpx":
            self._poster = _HttpxPoster(url, client, timeout, shards)
        else:
            raise ValueError(f"unknown RPC transport {transport!r}")
        self._ids = itertools.count(1)
        self._queue: list[tuple[dict[str, Any], asyncio.Future[Any]]] = []
        self._flush_scheduled = False
        self._inflight: set[asyncio.Task[None]] = set()

    async def call(self, method: str, params: list[Any]) -> Any:
        """The `result` of one call. Raises TransportError (unreachable, HTTP error,
        non-JSON answer) or RpcError (a JSON-RPC error object)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append(({"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params},
                            future))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        self._flush_scheduled = False
        queue, self._queue = self._queue, []
        for start in range(0, len(queue), self.batch_max):
            task = asyncio.get_running_loop().create_task(self._send(queue[start:start + self.batch_max]))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def _send(self, chunk: list[tuple[dict[str, Any], asyncio.Future[Any]]]) -> None:
        payload: Any = chunk[0][0] if len(chunk) == 1 else [req for req, _ in chunk]
        label = chunk[0][0]["method"] if len(chunk) == 1 else f"batch of {len(chunk)}"
        try:
            status, content = await self._poster.post(json.dumps(payload).encode())
            if status != 200:
                raise TransportError(f"{label}: HTTP {status}")
            try:
                answer = json.loads(content)
            except ValueError as exc:
                raise TransportError(f"{label}: answer is not JSON") from exc
            answers = answer if isinstance(answer, list) else [answer]
            by_id = {a.get("id"): a for a in answers if isinstance(a, dict)}
            if len(chunk) == 1 and len(by_id) == 1:
                by_id = {chunk[0][0]["id"]: next(iter(by_id.values()))}  # some nodes echo id null
        except TransportError as exc:
            for _, future in chunk:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException as exc:  # cancelled or a bug: never leave a caller waiting
            for _, future in chunk:
                if not future.done():
                    future.set_exception(TransportError(f"{label}: {type(exc).__name__}"))
            raise
        for req, future in chunk:
            if future.done():
                continue
            try:
                future.set_result(_result_of(req["method"], by_id.get(req["id"])))
            except TransportError as exc:
                future.set_exception(exc)

    async def warm(self) -> None:
        """Load now what the first call would load (a serving node calls this at start)."""
        await self._poster.warm()

    async def aclose(self) -> None:
        for task in list(self._inflight):
            task.cancel()
        if self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
        await self._poster.aclose()

    async def get_transaction(self, signature: str, commitment: str) -> dict[str, Any] | None:
        result = await self.call("getTransaction", [signature, {
            "encoding": "jsonParsed", "maxSupportedTransactionVersion": 0, "commitment": commitment}])
        if result is not None and not isinstance(result, dict):
            raise TransportError("getTransaction: result is not an object")
        return result

    async def signature_status(self, signature: str) -> dict[str, Any] | None:
        result = await self.call("getSignatureStatuses", [[signature], {"searchTransactionHistory": True}])
        try:
            status = result["value"][0]
        except (TypeError, KeyError, IndexError) as exc:
            raise TransportError("getSignatureStatuses: unexpected answer shape") from exc
        if status is not None and not isinstance(status, dict):
            raise TransportError("getSignatureStatuses: status is not an object")
        return status


def _result_of(method: str, doc: Any) -> Any:
    if not isinstance(doc, dict):
        raise TransportError(f"{method}: no answer in the node's reply")
    if doc.get("error") is not None:
        err = doc["error"] if isinstance(doc["error"], dict) else {"message": str(doc["error"])}
        code = err.get("code")
        raise RpcError(code if isinstance(code, int) else None, str(err.get("message", "")), err.get("data"))
    if "result" not in doc:
        raise TransportError(f"{method}: answer has neither result nor error")
    return doc["result"]
