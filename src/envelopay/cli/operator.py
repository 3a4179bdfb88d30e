"""What the operator commands share: one request to the running enforcer with the
operator credential, the exit code of an approval decision, and one page of a list.

Errors map by cli/output.EXIT_CODES: a missing token file is the environment (3), a
refused credential bad input (2), an unreachable enforcer the environment (3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from envelopay.cli.options import OperatorOptions
from envelopay.cli.output import FAILED, OK, answers, delivery_exit, finish, next_page, ran

if TYPE_CHECKING:
    from envelopay.enforcer.client.payment_client import SpendOperatorClient

T = TypeVar("T")


def ask(where: OperatorOptions, call: Callable[[SpendOperatorClient], Awaitable[T]]) -> T:
    """One session with the enforcer's operator API (the send and the spend side)."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.client.payment_client import SpendOperatorClient
    from envelopay.enforcer.service.launch import operator_token

    with answers():
        op_token = operator_token(where.token_file)

    async def go() -> T:
        async with SpendOperatorClient(where.url, op_token) as op:
            return await call(op)

    with answers(transport_prefix="enforcer: "):
        return asyncio.run(go())
    raise AssertionError("unreachable")  # `answers` ends the command on any error


def decision_exit(action: str, data: dict[str, Any]) -> int:
    """The exit code of a decision the enforcer took (HTTP 200): 0 when it did what was
    asked (approve/retry: the mail left; reject: it was rejected); else 1 when the peer
    or the policy refused the send for good, 3 when the environment failed it."""
    state = str(data.get("state", "")).upper()
    if data.get("ok") and state != "FAILED":
        return OK
    if action == "reject" and state == "REJECTED":
        return OK
    detail = str(data.get("detail") or "")
    # A send that could not even be made (it did not compose) is refused, not the environment.
    return delivery_exit(detail) if detail.startswith(_ENVIRONMENT) else FAILED


_ENVIRONMENT = ("delivery failed", "signing refused", "store error")


def listing(where: OperatorOptions, command: str, key: str, rows: list[dict[str, Any]], nxt: str | None,
             empty: str, line: Callable[[dict[str, Any]], str]) -> None:
    """One page of a list: its document, or its lines and how to get the next page."""
    if not where.as_json:
        next_page(nxt, f"envelopay {command}")
    finish(where.as_json, ran(command) | {key: rows, "next": nxt}, [line(r) for r in rows] or [empty])
