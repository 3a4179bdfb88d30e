"""The outbox drainer: pending outbox rows → send hook → (DKIM sign → transport).

The engine writes replies into the ledger's outbox in the same transaction as the
state change; this drains them afterwards. A row's Message-ID and Date were fixed at
write time, and the DKIM signature's t= is that Date (both algorithms we sign with are
deterministic), so composing and signing it again yields the same bytes: a resend after
a crash is the same mail, byte for byte, while the signing key is the same.

Rows are claimed before they are sent (`Store.outbox_claim`: one conditional update
with an owner and a lease), so two drainers on one ledger, in one process or in
several, never send the same row twice; only a drainer that dies between the send and
the mark leaves its claim to run out, and then the row goes again (at least once).

A message's own rows need not wait behind the batch a drain is sending: `send_now`
claims just those rows (`Store.outbox_claim_one`: only a row under no live claim, its
flow's first pending one) and sends them beside a running drain. In this process the
drainer keeps the two apart: a batch passes over a row `send_now` holds, and waits for
it before sending a later row of the same flow.

The send hook is where policy plugs in. `DirectHook` signs and delivers itself;
an enforcer hook hands the composed message to the send enforcer, which holds the
credential and answers with a verdict. Verdicts (as the enforcer's):

    sent              delivered (or handed to the next hop)     → mark_sent
    pending_approval  the enforcer queued it for a human          → mark_sent (it owns it now)
    blocked           policy refused it                           → permanent failure
    failed            the hop failed                              → retry with backoff, then give up
    unknown           we could not tell                           → retry (same Message-ID)
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from envelopay.dkim import DkimSigner, Signer
from envelopay.errors import TransportError
from envelopay.ledger.store import OutboxRow, Store
from envelopay.mail.transport import Transport
from envelopay.protocol.compose import compose
from envelopay.protocol.outbound import Outbound

__all__ = [
    "DirectHook",
    "DrainReport",
    "EnforcerHook",
    "OutboxDrainer",
    "PolicyVerdict",
    "SendHook",
    "SendPolicy",
    "SendResult",
]

SendStatus = Literal["sent", "pending_approval", "blocked", "failed", "unknown"]


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    detail: str = ""
    permanent: bool = False


class SendHook(Protocol):
    async def __call__(self, out: Outbound, raw: bytes) -> SendResult: ...


@dataclass
class DirectHook:
    """No enforcer: sign the exact bytes and hand them to the transport. `kept`, when
    set, is told of each mail the transport took: the row, and the bytes as handed over
    (the evidence tap, node/evidence_tap.py)."""

    transport: Transport
    signer: Signer | None = None
    kept: Callable[[Outbound, bytes], None] | None = None

    async def __call__(self, out: Outbound, raw: bytes) -> SendResult:
        if isinstance(self.signer, DkimSigner):
            signed = self.signer.sign_at(raw, out.date)  # t= fixed by the row
        else:
            signed = self.signer(raw) if self.signer is not None else raw
        try:
            await self.transport.send(signed, out.sender, out.recipient)
        except TransportError as exc:
            return SendResult("failed", str(exc), permanent=bool(getattr(exc, "permanent", False)))
        if self.kept is not None:
            self.kept(out, signed)
        return SendResult("sent")


class PolicyVerdict(Protocol):
    @property
    def status(self) -> SendStatus: ...

    @property
    def reason(self) -> str: ...


class SendPolicy(Protocol):
    """The send enforcer as the outbox sees it. The engine sits above no enforcer: the
    node wires one in (`envelopay.enforcer.client.http_client.EnforcerClient`)."""

    async def send_outbound(self, out: Outbound) -> PolicyVerdict:
        """Check and send one outbox row; TransportError when the enforcer is unreachable."""
        ...


@dataclass
class EnforcerHook:
    """The send enforcer as the send hook: the agent holds only its token; the enforcer
    holds the transport credential and the DKIM key, checks its policy and sends. The
    row's fixed Message-ID goes along, so a retried row is answered from the
    enforcer's record instead of being sent twice."""

    client: SendPolicy

    async def __call__(self, out: Outbound, raw: bytes) -> SendResult:
        try:
            verdict = await self.client.send_outbound(out)
        except TransportError as exc:
            return SendResult("unknown", f"enforcer unreachable: {exc}")
        status: SendStatus = verdict.status
        return SendResult(status, verdict.reason or "", permanent=status == "blocked")


@dataclass
class DrainReport:
    sent: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # pending_approval
    retry: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.sent) + len(self.held) + len(self.retry) + len(self.failed)


class OutboxDrainer:
    def __init__(
        self,
        store: Store,
        hook: SendHook,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_attempts: int = 8,
        backoff: Callable[[int], timedelta] = lambda n: timedelta(seconds=min(300, 2**n)),
        on_sent: Callable[[Outbound, bytes], Awaitable[None]] | None = None,
        parallel: int = 1,
        owner: str | None = None,
        lease: timedelta = timedelta(minutes=5),
    ) -> None:
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        self.store = store
        self.hook = hook
        self.clock = clock
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.on_sent = on_sent
        # Rows of different flows in flight at once (the hook must take concurrent calls,
        # e.g. a pool of connections); the rows of one flow always go one after another,
        # in outbox order.
        self.parallel = parallel
        # The claim's owner and how long a claimed row stays ours: longer than one send
        # takes (a row whose send outlives it may go twice).
        self.owner = owner or f"d-{secrets.token_hex(6)}"
        self.lease = lease
        # One drain at a time per process (the claims keep drains apart anyway; this
        # saves claiming nothing). A drain asked for while one runs just makes the
        # running one look again.
        self._lock = asyncio.Lock()
        self._again = False
        # The rows `send_now` is sending (Message-IDs) and their flows (lane key → set
        # when that row is done): what a batch passes over or waits for.
        self._direct: set[str] = set()
        self._direct_flows: dict[str, asyncio.Event] = {}
        # `send_now`s sending at once (each holds a connection of the transport).
        self._direct_gate = asyncio.Semaphore(max(4, parallel))

    async def send_now(self, message_ids: Sequence[str]) -> DrainReport:
        """Send these rows now, without waiting for a drain in progress. A row is sent
        here only if it can be claimed alone (pending, due, under no live claim, the
        first pending row of its flow); any other is left to a drain, and the caller
        must start one. The rows go one after another, in the order given."""
        report = DrainReport()
        for mid in message_ids:
            if mid in self._direct:
                continue
            async with self._direct_gate:
                now = self.clock()
                row = self.store.outbox_claim_one(mid, self.owner, now, now + self.lease)
                if row is None:
                    continue
                key = _lane_key(row)
                done = self._direct_flows[key] = asyncio.Event()
                self._direct.add(mid)
                try:
                    await self._one(row, report)
                finally:
                    self._direct.discard(mid)
                    del self._direct_flows[key]
                    done.set()
        return report

    async def _after_direct(self, row: OutboxRow) -> None:
        """Wait until no `send_now` of this process sends a row of `row`'s flow."""
        while (done := self._direct_flows.get(_lane_key(row))) is not None:
            await done.wait()

    async def drain_once(self, limit: int = 100) -> DrainReport:
        report = DrainReport()
        now = self.clock()
        # A read first: after a send_now (every message's own rows) there is usually
        # nothing else to send, and a claim that finds nothing still costs a write
        # transaction. The rows send_now holds are this owner's: at most that many are
        # listed before the first row a claim would hand out.
        if all(mid in self._direct
               for mid in self.store.outbox_claimable(self.owner, now, len(self._direct) + 1)):
            return report
        rows = self.store.outbox_claim(self.owner, now, now + self.lease, limit)
        # A row `send_now` holds came along (its claim is this owner's too): not ours to
        # send. Checked before any await, so it cannot have been sent and marked since.
        rows = [r for r in rows if r.outbound.message_id not in self._direct]
        if self.parallel == 1 or len(rows) < 2:
            for row in rows:
                await self._after_direct(row)
                await self._one(row, report)
            return report
        lanes: dict[str, list[OutboxRow]] = {}
        for row in rows:
            lanes.setdefault(_lane_key(row), []).append(row)
        gate = asyncio.Semaphore(self.parallel)

        async def lane(queue: list[OutboxRow]) -> None:
            async with gate:
                for row in queue:
                    await self._after_direct(row)
                    await self._one(row, report)

        await asyncio.gather(*(lane(q) for q in lanes.values()))
        return report

    async def drain(self, limit: int = 100) -> DrainReport:
        """Drain until nothing is due now (rows scheduled for later are left)."""
        total = DrainReport()
        if self._lock.locked():
            self._again = True
            return total
        async with self._lock:
            while True:
                self._again = False
                rep = await self.drain_once(limit)
                for name in ("sent", "held", "retry", "failed"):
                    getattr(total, name).extend(getattr(rep, name))
                # Rows written meanwhile in this process come with a drain() call that
                # set _again; a full batch may have more behind it. Otherwise: done.
                if rep.count < limit and not self._again:
                    return total

    async def _one(self, row: OutboxRow, report: DrainReport) -> None:
        out = row.outbound
        mid = out.message_id
        try:
            raw = compose(out)
        except Exception as exc:  # a row we can never compose must not block the queue
            self.store.mark_failed(mid, self.clock(), f"compose: {type(exc).__name__}: {exc}")
            report.failed.append(mid)
            return
        result = await self.hook(out, raw)
        now = self.clock()
        if result.status == "sent":
            self.store.mark_sent(mid, now)
            report.sent.append(mid)
            if self.on_sent is not None:
                await self.on_sent(out, raw)
        elif result.status == "pending_approval":
            self.store.mark_sent(mid, now)
            report.held.append(mid)
        elif result.status == "blocked" or result.permanent or row.attempts + 1 >= self.max_attempts:
            self.store.mark_failed(mid, now, f"{result.status}: {result.detail}")
            report.failed.append(mid)
        else:
            retry_at = now + self.backoff(row.attempts)
            self.store.mark_failed(mid, now, f"{result.status}: {result.detail}", retry_at)
            report.retry.append(mid)


def _lane_key(row: OutboxRow) -> str:
    # The rows of one flow go one after another; a row without a flow is a lane of its own.
    return row.flow_id or f"\0{row.outbound.message_id}"
