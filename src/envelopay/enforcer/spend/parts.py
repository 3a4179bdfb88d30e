"""What the spend side's steps (decide, payments_exec, finisher) need of `Payments`, as a
protocol: they take the parts, not the class, so payments.py imports them and none of
them imports payments.py (no cycle, not even one for types only)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.intent import Intent
from envelopay.enforcer.spend.invoices import InvoiceSource
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.rails.custodial import CustodialPayer

if TYPE_CHECKING:
    from envelopay import dkim  # the package loads cryptography: for types only

__all__ = ["PaymentParts"]


class PaymentParts(Protocol):
    """A payments service's parts and the few operations the steps call back."""

    enforcer: Enforcer
    store: PaymentStore
    vault: Vault | None
    payers: dict[str, CustodialPayer]
    invoices: InvoiceSource | None
    dns: dkim.DnsLookup | None
    crash: Callable[[str], None]
    new_id: Callable[[], str]
    _active: set[str]  # the intents this process is executing now

    @property
    def clock(self) -> Callable[[], float]: ...

    def disposition(self, i: Intent) -> PaymentDisposition: ...

    async def resume(self, i: Intent) -> PaymentDisposition: ...

    async def _give_back(self, agent_id: str, taken: list[list[Any]]) -> None: ...

    def lock_for(self, wallet_id: str) -> AbstractAsyncContextManager[None]: ...
