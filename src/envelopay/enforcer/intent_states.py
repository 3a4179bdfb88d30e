"""The payment intent's state machine as a table, in the manner of envelopay.flows: the
one place that says which move is allowed from which state. Pure.

Each store transition (enforcer/payment_store.py) is one conditional UPDATE from the
table's source states to its target, so a move the table does not allow finds no row;
payments_exec.py drives an intent by looking its state up in `DRIVEN` and checks every
FAILED it writes against `may`. SPEC.md's diagram is drawn from this table
(`render_mermaid`; tests/enforcer/test_intent_states.py keeps it current).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["BEGIN", "DRIVEN", "END", "START", "TRANSITIONS", "Move", "Row", "may", "render_mermaid", "target"]

START = "(call)"  # before the intent exists: the call that makes it


class Move(StrEnum):
    HOLD = "hold"  # the call is held for an operator (a check said pending_approval)
    RESERVE = "reserve"  # the call is allowed: caps taken, intent written, one transaction
    APPROVE = "approve"  # the operator approves (requires an ACTIVE agent)
    REJECT = "reject"  # the operator rejects
    CLAIM = "claim"  # the executor takes an approved intent (requires ACTIVE)
    SIGN_BROADCAST = "sign+claim broadcast"  # tx id and bytes recorded, broadcast claimed (ACTIVE)
    SIGN = "sign"  # recorded by versions before the one-statement claim only
    BROADCAST = "claim broadcast"  # of an intent an earlier version left SIGNED (ACTIVE)
    CONFIRM = "chain confirms"  # and the email could not go out at once
    DELIVER = "email delivered"  # the PAY's delivery and its send record, one transaction
    FAIL = "fail"  # no money moved, or none can move any more: caps handed back


@dataclass(frozen=True, slots=True)
class Row:
    state: str
    move: Move
    new_state: str


TRANSITIONS: tuple[Row, ...] = (
    Row(START, Move.HOLD, "PENDING"),
    Row(START, Move.RESERVE, "RESERVED"),
    Row("PENDING", Move.APPROVE, "APPROVED"),
    Row("PENDING", Move.REJECT, "REJECTED"),
    Row("APPROVED", Move.CLAIM, "RESERVED"),
    Row("RESERVED", Move.SIGN_BROADCAST, "BROADCAST"),
    Row("RESERVED", Move.SIGN, "SIGNED"),
    Row("SIGNED", Move.BROADCAST, "BROADCAST"),
    Row("BROADCAST", Move.CONFIRM, "PAID"),
    Row("BROADCAST", Move.DELIVER, "SENT"),
    Row("PAID", Move.DELIVER, "SENT"),
    # FAILED only where no money has moved (RESERVED, SIGNED, APPROVED: killed, a rail
    # refusal, no key, a PAY that could not be sent), or none can (BROADCAST: the
    # transaction expired or failed on chain).
    Row("APPROVED", Move.FAIL, "FAILED"),
    Row("RESERVED", Move.FAIL, "FAILED"),
    Row("SIGNED", Move.FAIL, "FAILED"),
    Row("BROADCAST", Move.FAIL, "FAILED"),
)

# The states an executor drives on (payments_exec._advance): each has its driver there.
DRIVEN = ("RESERVED", "SIGNED", "BROADCAST")

_INDEX = {(r.state, r.move): r.new_state for r in TRANSITIONS}


def target(state: str, move: Move) -> str | None:
    """The state `move` leads to from `state`, or None when the table forbids it."""
    return _INDEX.get((state, move))


def may(state: str, move: Move) -> bool:
    return (state, move) in _INDEX


BEGIN = "<!-- generated:intent-states -->"
END = "<!-- /generated:intent-states -->"


def render_mermaid() -> str:
    lines = [BEGIN, "```mermaid", "stateDiagram-v2"]
    for r in TRANSITIONS:
        src = "[*]" if r.state == START else r.state
        lines.append(f"    {src} --> {r.new_state}: {r.move.value}")
    lines += ["```", END]
    return "\n".join(lines)
