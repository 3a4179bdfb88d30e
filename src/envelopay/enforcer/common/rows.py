"""Rows a store statement returned, made into records: one helper both stores use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from envelopay.persist import NamedRow

__all__ = ["first", "newest_first"]

T = TypeVar("T")


def first(rows: Sequence[NamedRow], make: Callable[[NamedRow], T]) -> T | None:
    """The first row as a record, or None when the statement found no row."""
    return make(rows[0]) if rows else None


def newest_first(
    statement: str, agent_id: str | None, limit: int, before: tuple[float, str] | None
) -> tuple[str, tuple[object, ...]]:
    """The statement of one page newest first (`statement`, or `statement_of` for one
    agent's rows) and its parameters; `before` is the (created_at, id) of the previous
    page's last row."""
    at, ident = before if before is not None else (float("inf"), "")
    if agent_id is None:
        return statement, (at, ident, limit)
    return f"{statement}_of", (at, ident, agent_id, limit)
