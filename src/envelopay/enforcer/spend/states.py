"""The payment intent's state machine (enforcer/common/state_table.py). Each store transition
(enforcer/spend/store.py) is one conditional UPDATE from the table's source states to its
target; payments_exec.py drives the states in `DRIVEN` and writes FAILED only where the
table allows it. SPEC.md "Payment intents" draws the table; tests/enforcer/
test_intent_states.py runs every move from every state on both stores.
"""

from __future__ import annotations

from enum import StrEnum

from envelopay.enforcer.common.state_table import START, Row, StateTable, approval_rows

__all__ = ["DRIVEN", "INTENTS", "Move"]


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


INTENTS = StateTable(
    "intent-states",
    (
        Row(START, Move.RESERVE, "RESERVED"),
        *approval_rows(Move.HOLD, Move.APPROVE, Move.REJECT),
        Row("APPROVED", Move.CLAIM, "RESERVED"),
        Row("RESERVED", Move.SIGN_BROADCAST, "BROADCAST"),
        Row("RESERVED", Move.SIGN, "SIGNED"),
        Row("SIGNED", Move.BROADCAST, "BROADCAST"),
        Row("BROADCAST", Move.CONFIRM, "PAID"),
        Row("BROADCAST", Move.DELIVER, "SENT"),
        Row("PAID", Move.DELIVER, "SENT"),
        # FAILED only where no money has moved (APPROVED, RESERVED, SIGNED: killed, a rail
        # refusal, no key, a PAY that could not be sent), or none can (BROADCAST: the
        # transaction expired or failed on chain).
        Row("APPROVED", Move.FAIL, "FAILED"),
        Row("RESERVED", Move.FAIL, "FAILED"),
        Row("SIGNED", Move.FAIL, "FAILED"),
        Row("BROADCAST", Move.FAIL, "FAILED"),
    ),
)

# The states an executor drives on (payments_exec._advance): each has its driver there.
DRIVEN = ("RESERVED", "SIGNED", "BROADCAST")
