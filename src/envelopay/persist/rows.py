"""A row read by column name. SQLite hands out `sqlite3.Row` (row_factory) and PostgreSQL a
`Record` (`named_row`, the same shape: by name, and by position for code outside the stores):
both answer `row["state"]`, so a store reads its rows with one code path on both backends,
and a column added or moved in a SELECT cannot shift another. Measured per row (a
ten-column row, four columns read): SQLite 3.50 -> 3.62 us for a one-row statement against
plain tuples; PostgreSQL 0.68 -> 1.02 us against tuple_row (dict_row: 1.28 us)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["NamedRow", "Record", "columns", "named_row"]


class NamedRow(Protocol):
    """A result row indexed by its column's name (or `AS` alias)."""

    def __getitem__(self, key: str, /) -> Any: ...


class Record:
    """A PostgreSQL row as `sqlite3.Row` is one: by column name, and (for code not yet
    reading by name) by position; iterating yields the values. Made by `named_row`."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: Mapping[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: str | int, /) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def keys(self) -> list[str]:
        return list(self._index)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return tuple(self._values) == tuple(other._values)
        return isinstance(other, tuple) and tuple(self._values) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Record({dict(zip(self._index, self._values, strict=False))!r})"


def columns(description: Sequence[Sequence[Any]] | None) -> dict[str, int]:
    """name -> position of a DB-API cursor's `description` (sqlite3 and psycopg alike)."""
    return {} if description is None else {d[0]: i for i, d in enumerate(description)}


def named_row(cursor: Any) -> Callable[[Sequence[Any]], Record]:
    """A psycopg row factory: `Record`s, the column index built once per result."""
    index = columns(cursor.description)

    def make(values: Sequence[Any]) -> Record:
        return Record(values, index)

    return make
