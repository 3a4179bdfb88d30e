"""What every enforcer route reads from a request the same way: the Bearer token, and a
JSON object under the send path's limits (request_bodies.decode_send_body: size, depth, huge
numbers, lone surrogates)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from envelopay.enforcer.send.model import Disposition
from envelopay.enforcer.service.request_bodies import decode_send_body

__all__ = ["bearer", "read_object"]


def bearer(request: web.Request) -> str | None:
    auth = request.headers.get("Authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


async def read_object(request: web.Request) -> dict[str, Any] | Disposition:
    """The request's JSON object, or why not as a `blocked` disposition with its code."""
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return Disposition(status="blocked", reason="body too large: request over 1 MiB", code="too_large")
    return decode_send_body(data)
