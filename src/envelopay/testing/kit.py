"""How every kit in testing/ runs: its checks in order against the parts the implementer's
factory makes, each check's name in the list it returns, and the first check that fails
named at the start of the AssertionError it raises (so a kit's failure says which rule)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

F = TypeVar("F")


def run_checks(checks: Sequence[Callable[[F], None]], factory: F) -> list[str]:
    """Run `checks` against `factory`, in order; return their names."""
    passed: list[str] = []
    for check in checks:
        try:
            check(factory)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc
        passed.append(check.__name__)
    return passed


async def run_async_checks(checks: Sequence[Callable[[F], Awaitable[None]]], factory: F) -> list[str]:
    """`run_checks` for the kits whose parts are async (the enforcer's stores)."""
    passed: list[str] = []
    for check in checks:
        try:
            await check(factory)
        except AssertionError as exc:
            raise AssertionError(f"{check.__name__}: {exc}") from exc
        passed.append(check.__name__)
    return passed
