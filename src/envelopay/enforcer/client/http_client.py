"""Clients of the enforcer service. `EnforcerClient` is the send policy the node wires into
the engine's outbox, and what the MCP front uses (an agent token); `OperatorClient` is
what the CLI uses.

Policy verdicts come back as `Disposition` values; only an unreachable or misbehaving
service raises TransportError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlencode

import httpx

from envelopay.enforcer.send.model import Disposition, SendRequest
from envelopay.errors import TransportError, UsageError
from envelopay.protocol.compose import message_json
from envelopay.protocol.outbound import Outbound

T = TypeVar("T")

__all__ = ["EnforcerClient", "OperatorClient", "answer", "request_from_outbound"]


def request_from_outbound(out: Outbound, *, text: str = "") -> SendRequest:
    """The send request for an outbox row: its fields, with its fixed Message-ID, so a
    retried row is answered from the enforcer's record instead of being sent twice."""
    return SendRequest(
        to=out.recipient,
        sender=out.sender,
        text=text,
        subject=out.note,
        msg_type=str(out.message.type),
        body=json.loads(message_json(out.message)),
        in_reply_to=out.in_reply_to,
        references=out.references,
        message_id=out.message_id,
    )


class _Http:
    def __init__(self, url_or_socket: str, token: str, *, timeout: float = 60.0) -> None:
        if url_or_socket.startswith(("http://", "https://")):
            transport = httpx.AsyncHTTPTransport()
            base = url_or_socket.rstrip("/")
        else:  # a Unix socket path
            transport = httpx.AsyncHTTPTransport(uds=url_or_socket)
            base = "http://enforcer"
        self._client = httpx.AsyncClient(
            base_url=base, transport=transport, timeout=timeout,
            headers={"Authorization": f"Bearer {token}"},
        )

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        try:
            response = await self._client.request(method, path, json=body)
            data = response.json()
        except httpx.HTTPError as exc:
            raise TransportError(f"enforcer unreachable: {exc}") from exc
        except ValueError as exc:
            raise TransportError(f"enforcer answered non-JSON (HTTP {response.status_code})") from exc
        return response.status_code, data

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class EnforcerClient(_Http):
    """`EnforcerClient(url_or_socket, token)`: `await send(request)`, `await status(id)`."""

    async def send(self, request: SendRequest | Mapping[str, Any]) -> Disposition:
        body = request.to_json() if isinstance(request, SendRequest) else dict(request)
        status, data = await self._call("POST", "/v1/send", body)
        return self._disposition(status, data)

    async def send_outbound(self, out: Outbound) -> Disposition:
        """An outbox row through the enforcer: the engine's `SendPolicy`, which the node
        wires into the outbox's `EnforcerHook`."""
        return await self.send(request_from_outbound(out))

    async def status(self, send_id: str) -> Disposition:
        status, data = await self._call("GET", f"/v1/sends/{quote(send_id, safe='')}")
        return self._disposition(status, data)

    @staticmethod
    def _disposition(status: int, data: Any) -> Disposition:
        return answer(status, data, Disposition.from_json)


def answer(status: int, data: Any, parse: Callable[[Any], T]) -> T:
    """A disposition the enforcer answered (always HTTP 200): anything else, or a body
    that does not parse, is a transport fault, never a verdict."""
    if status != 200:
        raise TransportError(f"enforcer answered HTTP {status}: {data!r}")
    try:
        return parse(data)
    except ValueError as exc:
        raise TransportError(str(exc)) from exc


class OperatorClient(_Http):
    """The operator API (operator credential)."""

    async def _ok(self, method: str, path: str, body: Any = None, accept: tuple[int, ...] = (200,)) -> Any:
        status, data = await self._call(method, path, body)
        if status == 401:
            raise UsageError("the enforcer refused the operator credential")
        if status == 400:
            raise UsageError(str(data.get("error", data)) if isinstance(data, dict) else str(data))
        if status not in accept:
            raise TransportError(f"enforcer answered HTTP {status}: {data!r}")
        return data

    async def create_agent(
        self, name: str, address: str, *, allow: tuple[str, ...] = (), hourly: int = 20, daily: int = 100
    ) -> tuple[dict[str, Any], str]:
        data = await self._ok(
            "POST", "/v1/agents",
            {"name": name, "address": address, "allow": list(allow), "hourly": hourly, "daily": daily},
            accept=(201,),
        )
        return data["agent"], data["token"]

    async def list_agents(self, limit: int = 100, after: str | None = None) -> list[dict[str, Any]]:
        return (await self.agents_page(limit, after))[0]

    async def agents_page(
        self, limit: int = 100, after: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of agents by name, and the `after` of the next page (None: no more)."""
        data = await self._ok("GET", "/v1/agents?" + _query(limit, after))
        return list(data["agents"]), data.get("next")

    async def kill_agent(self, name: str) -> dict[str, Any] | None:
        data = await self._ok("POST", f"/v1/agents/{name}/kill", accept=(200, 404))
        agent = data.get("agent")
        return agent if isinstance(agent, dict) else None

    async def list_approvals(self, limit: int = 100, after: str | None = None) -> list[dict[str, Any]]:
        return (await self.approvals_page(limit, after))[0]

    async def approvals_page(
        self, limit: int = 100, after: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of the queue, pending first, and the token of the next (None: no more)."""
        data = await self._ok("GET", "/v1/approvals?" + _query(limit, after))
        return list(data["approvals"]), data.get("next")

    async def approval(self, approval_id: str) -> dict[str, Any] | None:
        """One approval with what it would let leave (enforcer/service/approval_view.py); None: no such."""
        data = await self._ok("GET", f"/v1/approvals/{quote(approval_id, safe='')}", accept=(200, 404))
        return data if isinstance(data, dict) and "id" in data else None

    async def decide(
        self, send_id: str, action: str, content_hash: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        """approve | reject | retry → (HTTP status, decision): 200 taken, 409 conflict, 404
        missing. With `content_hash` (from `approval`) the decision binds to that content."""
        body = None if content_hash is None else {"content_hash": content_hash}
        status, data = await self._call("POST", f"/v1/approvals/{send_id}/{action}", body)
        if status == 401:
            raise UsageError("the enforcer refused the operator credential")
        if status not in (200, 404, 409) or not isinstance(data, dict):
            raise TransportError(f"enforcer answered HTTP {status}: {data!r}")
        return status, data


def _query(limit: int, after: str | None) -> str:
    return urlencode({"limit": limit} if after is None else {"limit": limit, "after": after})
