"""Per-flow state machines (pure, sans-IO).

Each flow module opens with its `TRANSITIONS` table; `TABLES` maps a flow kind to its
table and `step()` runs one transition. `opening()` says which flow a message opens
when it joins no existing one. Diagrams in SPEC.md are rendered from the tables
(`envelopay.flows.diagram`).
"""

from __future__ import annotations

from envelopay.flows import exchange, first_contact, invoice, order, pay, prepaid
from envelopay.flows.core import (
    ILLEGAL,
    START,
    Action,
    Direction,
    Event,
    FlowKind,
    FlowState,
    ProofCheck,
    Row,
    Side,
    Step,
    Table,
    event_of,
    starting_event,
    step_table,
)
from envelopay.protocol.messages import Message

__all__ = [
    "ILLEGAL",
    "START",
    "TABLES",
    "Action",
    "Direction",
    "Event",
    "FlowKind",
    "FlowState",
    "ProofCheck",
    "Row",
    "Side",
    "Step",
    "Table",
    "event_of",
    "opening",
    "step",
]

TABLES: dict[FlowKind, Table] = {
    m.KIND: m.TRANSITIONS for m in (pay, order, invoice, first_contact, exchange, prepaid)
}


def step(fs: FlowState, message: Message, direction: Direction, event: Event | None = None) -> Step:
    """One transition of the flow `fs` for `message` travelling in `direction` (read as
    `event` when given)."""
    return step_table(TABLES[fs.kind], fs, message, direction, event)


def opening(message: Message, direction: Direction) -> FlowState | None:
    """The fresh flow `message` opens (state "start"), or None if it can open none."""
    start = starting_event(message)
    if start is None:
        return None
    kind, side_in, side_out = start
    return FlowState(kind, side_in if direction is Direction.IN else side_out)


def accepts(fs: FlowState, message: Message, direction: Direction) -> bool:
    """Whether the table has a row for this message in this state (guards not run)."""
    ev = event_of(message)
    return any(
        r.state == fs.state and r.event is ev and r.direction is direction and r.side is fs.side
        for r in TABLES[fs.kind]
    )
