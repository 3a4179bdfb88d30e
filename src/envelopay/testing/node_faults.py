"""Faults a JSON-RPC dev node (`devnet.rpc_server.JsonRpcServer`) can be made to show, as
wrappers of its handler: what a payer must survive without paying twice or calling a
payment failed that may still land (SPEC.md "What a failed `pay()` means").

    JsonRpcServer(hangs_up_after("sendTransaction")(solana_rpc_handler(chain)))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envelopay.devnet.rpc_server import JsonRpcFault

__all__ = ["Handler", "fails_first", "hangs_up_after"]

Handler = Callable[[str, list[Any]], Any]
Wrap = Callable[[Handler], Handler]


def hangs_up_after(method: str) -> Wrap:
    """The node carries out each `method` call (a transaction sent is taken), then drops
    the connection before answering: the caller hears a transport error, not a refusal."""

    def wrap(handle: Handler) -> Handler:
        def gone(name: str, params: list[Any]) -> Any:
            result = handle(name, params)
            if name == method:
                raise ConnectionResetError(f"the node hung up after taking {name}")
            return result

        return gone

    return wrap


def fails_first(method: str, times: int, calls: list[str] | None = None, *, code: int = -32005,
                message: str = "node is behind") -> Wrap:
    """The first `times` calls of `method` get a JSON-RPC error (`code`, `message`); the
    later ones are answered. Each call of `method` is appended to `calls` when given."""
    seen = calls if calls is not None else []

    def wrap(handle: Handler) -> Handler:
        def flaky(name: str, params: list[Any]) -> Any:
            if name == method:
                seen.append(name)
                if len(seen) <= times:
                    raise JsonRpcFault(code, message)
            return handle(name, params)

        return flaky

    return wrap
