"""What the engine asks and tells the application: decisions are values, never raises.

An `Application` (a worker, or a client) answers the business questions of a step
(METHODS for a WHICH, INVOICE or FULFILL for an ORDER, …) with a message, a `Refuse`
(which becomes an OOPS with its code) or silence, and hears committed steps as a
`Notice`. `BaseApplication` serves nothing; subclass it and override what you serve.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeAlias

from envelopay.flows import FlowKind, Side
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Invoice,
    Message,
    Methods,
    Offer,
    Order,
    Pay,
    Which,
)
from envelopay.rails.interface import Verdict

__all__ = ["Application", "BaseApplication", "Context", "Decision", "Enqueue", "Notice", "Refuse"]


@dataclass(frozen=True, slots=True)
class Refuse:
    """An application's refusal: becomes an OOPS with this code (and `extra` fields in its
    error object: an extension, e.g. a refund, SPEC.md "Refunds")."""

    code: OopsCode
    note: str = ""
    extra: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Take the work on as a job (envelopay.ledger.jobs) instead of answering now: the
    engine writes the job row in the step's own commit, so paid work is never forgotten,
    and the job runner answers FULFILL (or OOPS) later through the outbox."""

    task: str  # the declared task's name
    params: Mapping[str, Any]  # the ORDER's task as received
    policy: str = "refund"  # what a paid job that fails for good gets: "refund" | "hold"
    idempotent: bool = False
    # Money paid back as the work was taken on (a prepaid ORDER's excess, SPEC.md "Refunds"):
    # kept in the flow's data (`refund`), so the job's FULFILL says it.
    refund: Mapping[str, Any] | None = None


Decision: TypeAlias = "Message | Refuse | Enqueue | OopsCode | None"


@dataclass(frozen=True, slots=True)
class Context:
    """What an application handler knows about the step it is asked to decide."""

    local: str
    peer: str
    flow_id: str
    kind: FlowKind
    state: str
    data: Mapping[str, Any]
    now: datetime
    new_id: Callable[[str], str]
    verdict: Verdict | None = None


@dataclass(frozen=True, slots=True)
class Notice:
    """Told to the application after a step is committed (payer side mostly: METHODS,
    INVOICE, FULFILL, ACCEPT, OOPS received; payee side: an unsolicited PAY)."""

    flow_id: str
    kind: FlowKind
    side: Side
    state: str
    peer: str
    message: Message
    message_id: str | None
    verdict: Verdict | None = None
    job_id: str | None = None  # the job this step took on (Enqueue), told once it is committed


class Application(Protocol):
    """What a worker (or a client) decides. Results are data; raising is a bug, which
    the engine answers with OOPS task_failed."""

    def wallet(self, chain: str, token: str) -> str | None:
        """Our receiving wallet for an asset, or None when we do not take it."""
        ...

    async def methods(self, which: Which, ctx: Context) -> Methods | None: ...

    async def order(
        self, order: Order, ctx: Context, *, paid: int | None
    ) -> Invoice | Fulfill | Enqueue | Refuse | OopsCode | None:
        """An ORDER arrived: quote it (INVOICE), do it now (FULFILL, free or prepaid with
        `paid` verified units), take it on as a job (Enqueue), or refuse it."""
        ...

    async def fulfill(
        self, order: Order, pay: Pay, ctx: Context
    ) -> Fulfill | Enqueue | Refuse | OopsCode: ...

    async def offer(self, offer: Offer, ctx: Context) -> Accept | Refuse | OopsCode | None:
        """An OFFER whose give leg verified: counter-pay (rail.pay) and ACCEPT, or refuse."""
        ...

    async def notify(self, notice: Notice) -> None: ...


class BaseApplication:
    """An application that takes no assets, sells nothing and ignores notices.
    Subclass and override what you serve."""

    def wallet(self, chain: str, token: str) -> str | None:
        return None

    async def methods(self, which: Which, ctx: Context) -> Methods | None:
        return None

    async def order(
        self, order: Order, ctx: Context, *, paid: int | None
    ) -> Invoice | Fulfill | Refuse | OopsCode | None:
        return Refuse(OopsCode.UNKNOWN_TASK, "this address takes no orders")

    async def fulfill(self, order: Order, pay: Pay, ctx: Context) -> Fulfill | Refuse | OopsCode:
        return Refuse(OopsCode.TASK_FAILED, "this address fulfils nothing")

    async def offer(self, offer: Offer, ctx: Context) -> Accept | Refuse | OopsCode | None:
        return None

    async def notify(self, notice: Notice) -> None:
        return None
