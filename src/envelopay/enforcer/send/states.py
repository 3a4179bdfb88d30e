"""The send request's state machine (enforcer/common/state_table.py): a held send waits for an
operator; an approved one is executed once (at least once, SPEC "Approval queue"). Each
store decision (enforcer/send/store.py) is one conditional UPDATE from the table's source states;
tests/enforcer/test_intent_states.py runs every move from every state on both stores.
"""

from __future__ import annotations

from enum import StrEnum

from envelopay.enforcer.common.state_table import START, Row, StateTable, approval_rows

__all__ = ["SENDS", "SendMove"]


class SendMove(StrEnum):
    SEND = "allowed: delivered"  # the checks passed and the mail left at once
    HOLD = "held"  # a check said pending_approval
    FAIL_NOW = "allowed: delivery failed"  # the checks passed, delivery refused for good
    APPROVE = "approve"  # the operator approves (requires an ACTIVE agent)
    REJECT = "reject"  # the operator rejects
    RECLAIM = "reclaim"  # a stranded APPROVED row taken again (decided_at refreshed)
    DELIVER = "execute: delivered"
    FAIL = "execute: failed"  # killed meanwhile, not composable, refused for good


SENDS = StateTable(
    "send-states",
    (
        Row(START, SendMove.SEND, "SENT"),
        Row(START, SendMove.FAIL_NOW, "FAILED"),
        *approval_rows(SendMove.HOLD, SendMove.APPROVE, SendMove.REJECT),
        Row("APPROVED", SendMove.RECLAIM, "APPROVED"),
        Row("APPROVED", SendMove.DELIVER, "SENT"),
        Row("APPROVED", SendMove.FAIL, "FAILED"),
    ),
)
