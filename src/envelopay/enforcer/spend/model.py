"""The answer to a pay-then-send call: a disposition, never an exception.

paid_and_sent     the payment is on chain and the PAY (OFFER, ACCEPT) email was delivered
paid_refused      paid and sent, and the payee answered the PAY with an OOPS (its `code`):
                  the money moved; what the payee does with it is between the two parties
pending_approval  held for a human; nothing moved; poll check_payment_status
blocked           refused; nothing moved, nothing consumed
failed            no money moved (the rail refused, the transaction expired, a kill won)
unknown           in flight, or paid with the email not yet delivered (it is retried);
                  never a reason to pay again: a retry with the same key returns this intent
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import ClassVar, Literal

from envelopay.enforcer.common.wire import Decided, Verdict

__all__ = ["PAYMENT_STATUSES", "PaymentDecision", "PaymentDisposition", "PaymentStatus"]

PaymentStatus = Literal["paid_and_sent", "paid_refused", "pending_approval", "blocked", "failed", "unknown"]
PAYMENT_STATUSES: tuple[PaymentStatus, ...] = (
    "paid_and_sent",
    "paid_refused",
    "pending_approval",
    "blocked",
    "failed",
    "unknown",
)


@dataclass(frozen=True, slots=True)
class PaymentDisposition(Verdict):
    STATUSES: ClassVar[Collection[str]] = PAYMENT_STATUSES
    WHAT: ClassVar[str] = "payment disposition"

    status: PaymentStatus
    code: str = ""  # stable reason code
    reason: str = ""
    id: str | None = None  # the intent's id
    approval_id: str | None = None
    tx_id: str | None = None
    message_id: str | None = None  # the PAY's Message-ID (once sent)
    state: str | None = None  # the intent's state, lowercase
    amount: str | None = None
    token: str | None = None
    chain: str | None = None
    payee: str | None = None  # who is (or would be) paid: the PAY's recipient
    wallet: str | None = None  # the payee's wallet the payment goes to


@dataclass(frozen=True, slots=True)
class PaymentDecision(Decided[PaymentDisposition]):
    """An operator's decision on a held payment."""
