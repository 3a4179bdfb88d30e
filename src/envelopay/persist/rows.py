"""A row read by column name. SQLite hands out `sqlite3.Row` (row_factory) and PostgreSQL a
dict (psycopg's `dict_row`): both answer `row["state"]`, so a store reads its rows with one
code path on both backends, and a column added or moved in a SELECT cannot shift another."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["NamedRow"]


class NamedRow(Protocol):
    """A result row indexed by its column's name (or `AS` alias)."""

    def __getitem__(self, key: str, /) -> Any: ...
