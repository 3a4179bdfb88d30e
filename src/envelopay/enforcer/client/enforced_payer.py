"""Paying through the spend enforcer from a process that holds no wallet key: the worker's
OFFER counter-legs, when its config points payments at the enforcer as its mail is.

`EnforcedPayer.pay_leg(...)` is one `POST /v1/counter`: the enforcer runs the spend checks,
pays from the agent's wallet it holds, at most once per key, and answers with the proof;
the worker's own outbox then sends the ACCEPT through the send path. A held or refused
payment is a RailError (the worker answers the OFFER with an OOPS; nothing moved).
"""

from __future__ import annotations

from typing import Any

from envelopay.enforcer.client.payment_client import PaymentClient
from envelopay.errors import RailError

__all__ = ["EnforcedPayer"]


class EnforcedPayer:
    def __init__(self, enforcer: str, token: str, *, timeout: float = 60.0) -> None:
        self.enforcer = enforcer
        self.token = token
        self.timeout = timeout

    async def pay_leg(
        self, *, chain: str, token: str, amount: int, recipient: str, payee: str, key: str
    ) -> dict[str, Any]:
        """Pay `amount` of `token` on `chain` to the wallet `recipient` of `payee` (a mail
        address); `key` names this payment (a redo with the same key pays once)."""
        async with PaymentClient(self.enforcer, self.token, timeout=self.timeout) as client:
            d = await client.submit(
                "counter",
                {
                    "to": payee,
                    "chain": chain,
                    "token": token,
                    "amount": str(amount),
                    "wallet": recipient,
                    "idempotency_key": key,
                },
            )
        if d.status == "paid_and_sent" and d.tx_id:
            return {"tx": d.tx_id}
        reason = {"pending_approval": "pending_approval", "blocked": "spend_refused"}.get(
            d.status, "tx_failed"
        )
        if d.code == "insufficient_funds":
            reason = "insufficient_funds"
        raise RailError(reason, f"enforcer: {d.status} {d.code}".strip())
