"""A payment intent as the spend store records it (`Intent`), its states, and what one
payment call reads before deciding (`Context`); rows mapped by column name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from envelopay.enforcer.send.model import Agent
from envelopay.enforcer.spend.policy import SpendPolicy
from envelopay.enforcer.spend.vault import WalletRecord
from envelopay.persist import NamedRow
from envelopay.rails.amounts import human_amount

__all__ = ["INTENT_STATES", "IN_FLIGHT", "Context", "Intent", "IntentState", "intent_row", "wallet_row"]

IntentState = Literal[
    "PENDING", "APPROVED", "REJECTED", "RESERVED", "SIGNED", "BROADCAST", "PAID", "SENT", "FAILED"
]
INTENT_STATES: tuple[IntentState, ...] = (
    "PENDING",
    "APPROVED",
    "REJECTED",
    "RESERVED",
    "SIGNED",
    "BROADCAST",
    "PAID",
    "SENT",
    "FAILED",
)
IN_FLIGHT: tuple[IntentState, ...] = ("RESERVED", "SIGNED", "BROADCAST", "PAID")


@dataclass(frozen=True, slots=True)
class Intent:
    """One payment intent (see SPEC.md "Spend enforcer" for its state machine)."""

    id: str
    agent_id: str
    idem_key: str
    invoice_key: str | None
    kind: str
    state: IntentState
    code: str
    reason: str
    request: dict[str, Any]  # {"payment": PaymentRequest JSON, "mail": SendRequest JSON}
    chain: str
    token: str
    amount: int
    decimals: int
    payee: str
    wallet: str
    wallet_id: str
    invoice_ref: str | None
    message_id: str
    taken: list[list[Any]]  # the cap increments to hand back if no money moves
    tx_id: str | None
    tx_blob: bytes | None
    created_at: float
    decided_at: float | None
    decided_by: str | None
    agent_name: str
    deliverer: str | None = None  # the store instance delivering the PAY (liveness.py)

    def human_amount(self) -> str:
        return human_amount(self.amount, self.decimals)

    def to_json(self) -> dict[str, Any]:
        """The queue row: no tx bytes, no key material."""
        return {
            "id": self.id,
            "kind": "payment",
            "operation": self.kind,
            "agent_id": self.agent_id,
            "agent": self.agent_name,
            "state": self.state,
            "code": self.code,
            "reason": self.reason,
            "amount": str(self.amount),
            "amount_human": self.human_amount(),
            "chain": self.chain,
            "token": self.token,
            "asset": f"{self.chain}/{self.token}",
            "to": self.payee,
            "payee": self.payee,
            "wallet": self.wallet,
            "invoice": self.invoice_ref,
            "subject": f"pay {self.human_amount()} {self.token} on {self.chain}", "type": self.kind,
            "tx_id": self.tx_id,
            "message_id": self.message_id,
            "created_at": self.created_at,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """What one payment call reads before deciding, in one statement: the token's agent,
    its spend policy, the intent already recorded under the call's key (its id), and the
    agent's wallet on the call's chain with its sealed key (opened only to sign)."""

    agent: Agent
    policy: SpendPolicy
    prior_id: str | None
    wallet: WalletRecord | None
    sealed: bytes | None


def intent_row(row: NamedRow) -> Intent:
    blob, decided_at = row["tx_blob"], row["decided_at"]
    return Intent(
        id=row["id"],
        agent_id=row["agent_id"],
        idem_key=row["idem_key"],
        invoice_key=row["invoice_key"],
        kind=row["kind"],
        state=row["state"],
        code=row["code"],
        reason=row["reason"],
        request=json.loads(row["request"]),
        chain=row["chain"],
        token=row["token"],
        amount=int(row["amount"]),
        decimals=int(row["decimals"]),
        payee=row["payee"],
        wallet=row["wallet"],
        wallet_id=row["wallet_id"],
        invoice_ref=row["invoice_ref"],
        message_id=row["message_id"],
        taken=json.loads(row["taken"]),
        tx_id=row["tx_id"],
        tx_blob=bytes.fromhex(blob) if blob else None,
        created_at=float(row["created_at"]),
        decided_at=None if decided_at is None else float(decided_at),
        decided_by=row["decided_by"],
        agent_name=row["agent_name"] or "",
        deliverer=row["deliverer"],
    )


def wallet_row(row: NamedRow) -> WalletRecord:
    return WalletRecord(
        row["id"], row["agent_id"], row["chain"], row["address"], row["label"], float(row["created_at"])
    )
