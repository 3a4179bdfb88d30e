"""A state machine as a table of (state, move, new state) rows, in the manner of
envelopay.flows: what the enforcer's send requests (send/states.py) and payment intents
(spend/states.py) may do, each in one place. Pure.

The store implements each move as one conditional UPDATE from the move's source states to
its target, so a move the table does not allow finds no row; the tests run every move from
every state against both stores. SPEC.md's diagrams are drawn from the tables by flows.diagram's
functions, as the flows' are (scripts/flow_diagrams.py rewrites them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from envelopay.flows.diagram import markers, mermaid

__all__ = ["START", "Row", "StateTable", "approval_rows"]

START = "(call)"  # before the row exists: the call that makes it


@dataclass(frozen=True, slots=True)
class Row:
    state: str
    move: str
    new_state: str


def approval_rows(hold: str, approve: str, reject: str) -> tuple[Row, ...]:
    """An operator's approval, the same in both tables: a call a check held waits PENDING
    for an operator, who approves it (APPROVED, then the table's own execution) or
    rejects it (REJECTED, final)."""
    return (
        Row(START, hold, "PENDING"),
        Row("PENDING", approve, "APPROVED"),
        Row("PENDING", reject, "REJECTED"),
    )


@dataclass(frozen=True)
class StateTable:
    name: str  # names the generated block in SPEC.md
    rows: tuple[Row, ...]
    _index: dict[tuple[str, str], str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], str] = {}
        for r in self.rows:
            assert (r.state, r.move) not in index, f"{self.name}: two rows for {r.state} {r.move}"
            index[(r.state, r.move)] = r.new_state
        object.__setattr__(self, "_index", index)

    def target(self, state: str, move: str) -> str | None:
        """The state `move` leads to from `state`, or None when the table forbids it."""
        return self._index.get((state, move))

    def may(self, state: str, move: str) -> bool:
        return (state, move) in self._index

    def sources(self, move: str) -> tuple[str, ...]:
        return tuple(r.state for r in self.rows if r.move == move)

    def states(self) -> set[str]:
        return ({r.state for r in self.rows} | {r.new_state for r in self.rows}) - {START}

    def render_mermaid(self) -> str:
        """SPEC.md's block for this table, drawn as the flows' diagrams are."""
        begin, end = markers(self.name)
        edges = (("start" if r.state == START else r.state, r.new_state, r.move) for r in self.rows)
        return "\n".join([begin, *mermaid(edges), end])


def sql_list(states: Iterable[str]) -> str:
    """`'A', 'B'`: states for an SQL IN list (the names are the table's own, never input)."""
    return ", ".join(f"'{s}'" for s in states)
