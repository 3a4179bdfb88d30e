"""A batch of statements for `EnforcerStore.transaction`, and what it did."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Batch", "Step", "cursor_rows"]

Step = tuple[str, Sequence[Any]]  # one statement and its parameters


@dataclass(frozen=True, slots=True)
class Batch:
    """What `EnforcerStore.transaction` did: the rows each statement returned, and, when
    the batch required rows, the index of the first statement that returned none (then
    nothing of the batch was committed)."""

    rows: list[list[tuple[Any, ...]]]
    refused_at: int | None = None

    @property
    def committed(self) -> bool:
        return self.refused_at is None


async def cursor_rows(cur: Any) -> list[tuple[Any, ...]]:
    """The rows of an async (psycopg) cursor; none for a statement that returns none."""
    return [tuple(r) for r in await cur.fetchall()] if cur.description is not None else []
