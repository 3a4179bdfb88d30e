"""JSON-RPC transport for the Solana rail (one shared httpx connection pool).

solana-py 0.41 sends its requests through `httpx2`, a separate package that respx
does not intercept and that cannot share our pool; so the rail speaks JSON-RPC with
httpx directly, building transactions with solders/solana-py types. Requests are the
ones solana-py makes: `getTransaction` (jsonParsed, maxSupportedTransactionVersion 0),
`getSignatureStatuses`, `getLatestBlockhash`, `getBalance`, `getTokenAccountBalance`,
`getAccountInfo`, `sendTransaction`.
"""

from __future__ import annotations

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


class SolanaRpc:
    """A minimal async JSON-RPC client bound to one endpoint."""

    def __init__(self, url: str, client: httpx.AsyncClient | None = None, *, timeout: float = 10.0) -> None:
        self.url = url
        self._own = client is None
        self.client = client or httpx.AsyncClient(
            timeout=timeout, limits=httpx.Limits(max_connections=256, max_keepalive_connections=256)
        )
        self._ids = itertools.count(1)

    async def call(self, method: str, params: list[Any]) -> Any:
        """The `result` of one call. Raises TransportError (unreachable, HTTP error,
        non-JSON answer) or RpcError (a JSON-RPC error object)."""
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        try:
            resp = await self.client.post(self.url, content=json.dumps(body),
                                          headers={"Content-Type": "application/json"})
        except httpx.HTTPError as exc:
            raise TransportError(f"{method}: {type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise TransportError(f"{method}: HTTP {resp.status_code}")
        try:
            doc = json.loads(resp.content)
        except ValueError as exc:
            raise TransportError(f"{method}: answer is not JSON") from exc
        if not isinstance(doc, dict):
            raise TransportError(f"{method}: answer is not a JSON-RPC object")
        if doc.get("error") is not None:
            err = doc["error"] if isinstance(doc["error"], dict) else {"message": str(doc["error"])}
            code = err.get("code")
            message = str(err.get("message", ""))
            raise RpcError(code if isinstance(code, int) else None, message, err.get("data"))
        if "result" not in doc:
            raise TransportError(f"{method}: answer has neither result nor error")
        return doc["result"]

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

    async def aclose(self) -> None:
        if self._own:
            await self.client.aclose()
