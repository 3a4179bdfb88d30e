"""Rows a store statement returned, made into records: one helper both stores use."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from envelopay.persist import NamedRow

__all__ = ["first"]

T = TypeVar("T")


def first(rows: Sequence[NamedRow], make: Callable[[NamedRow], T]) -> T | None:
    """The first row as a record, or None when the statement found no row."""
    return make(rows[0]) if rows else None
