"""The `Store` protocol: the durable state behind the engine, and its record types.

Two transactions make one inbound step (the engine never holds a write transaction
open while a rail verifies a proof):

1. `begin_step(Claim)` — claim the Message-ID (a lease per worker), reserve
   (sender, protocol id) with the body's hash and the proof's canonical key, and read
   the flows the message's refs and threading headers point at. A retransmission
   (same sender, id and content under a new Message-ID) is finished right here: the
   recorded reply's outbox rows are queued again, so the same bytes go out.
2. `commit_step(Commit)` — in one transaction: the flow's new state (optimistic
   version check), the message log, refs, outbox rows, the proof's fate (spent
   forever, or released after a pending/unavailable verdict) and the outcome.

Everything else is reading, the outbox drain primitives and the outstanding calls of
the email-as-tool client. Every table is prefixed `ep_`; other areas keep their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol, runtime_checkable

from envelopay.ledger.jobs import Job, JobMove
from envelopay.protocol.autosubmit import AUTO_GENERATED, AUTO_REPLIED, AutoSubmitted
from envelopay.protocol.messages import MessageType, model_for
from envelopay.protocol.outbound import Outbound

__all__ = [
    "AnswerLimits",
    "Begin",
    "CallRecord",
    "CallStatus",
    "Claim",
    "Commit",
    "CommitResult",
    "FlowCount",
    "FlowFilter",
    "FlowRecord",
    "FlowWrite",
    "JobLine",
    "LogEntry",
    "OopsSent",
    "OutboxRow",
    "ProofKey",
    "RefundLine",
    "Store",
    "Summaries",
]

@dataclass(frozen=True, slots=True)
class AnswerLimits:
    """How many automatic answers one peer, and one thread, may draw within `window`
    (SPEC.md "Automatic answers (RFC 3834)"); 0 turns that limit off."""

    per_peer: int = 300
    per_thread: int = 20
    window: timedelta = timedelta(hours=1)
    # Answer mail that is not protocol with one help note per sender per day (off: the
    # mail is only recorded; SPEC.md "Mail that is not protocol").
    help: bool = False


AnswerVerdict = Literal["ok", "rate_limited", "loop_detected"]

BeginStatus = Literal["new", "seen", "busy", "retransmission", "duplicate_id", "proof_replayed"]
CallStatus = Literal["pending", "answered", "failed", "timeout"]


@dataclass(frozen=True, slots=True)
class ProofKey:
    """A proof's canonical identity: the chain and the rail's `proof_key`."""

    chain: str
    key: str


@dataclass(frozen=True, slots=True)
class FlowRecord:
    flow_id: str
    local: str  # our address
    peer: str  # the other party's address
    kind: str
    side: str
    state: str
    version: int
    data: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Claim:
    """What `begin_step` reserves for one inbound message."""

    local: str
    message_id: str
    content_hash: str  # of the protocol content (type + body), not of the raw bytes
    worker: str
    now: datetime
    lease_until: datetime
    sender: str | None = None
    protocol_id: str | None = None
    proof: ProofKey | None = None
    refs: tuple[str, ...] = ()  # typed refs: ids of messages *we* sent to `sender`
    thread: tuple[str, ...] = ()  # In-Reply-To first, then References (newest first)


@dataclass(frozen=True, slots=True)
class Begin:
    status: BeginStatus
    outcome: Mapping[str, Any] | None = None  # seen / retransmission: the recorded one
    requeued: tuple[str, ...] = ()  # retransmission: outbox Message-IDs queued again
    ref_flows: tuple[FlowRecord, ...] = ()
    thread_flows: tuple[tuple[str, FlowRecord], ...] = ()  # (Message-ID, its flow), thread order
    missing_refs: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LogEntry:
    flow_id: str
    at: datetime
    direction: str  # "in" | "out"
    type: str
    message_id: str | None
    protocol_id: str | None
    sender: str | None
    recipient: str | None
    body: Mapping[str, Any] | None
    verdict: Mapping[str, Any] | None = None
    oops: str | None = None
    seq: int = 0  # assigned by the store


@dataclass(frozen=True, slots=True)
class FlowWrite:
    record: FlowRecord  # new state/data; `version` is the version read (0: create)


@dataclass(frozen=True, slots=True)
class Commit:
    local: str
    now: datetime
    outcome: Mapping[str, Any]
    message_id: str | None = None  # the inbound message being finished (None: outbound only)
    worker: str | None = None
    flow: FlowWrite | None = None
    log: tuple[LogEntry, ...] = ()
    refs: tuple[tuple[str, str, str, str], ...] = ()  # (peer, author, protocol_id, flow_id)
    message_ids: tuple[tuple[str, str], ...] = ()  # (message_id, flow_id)
    outbox: tuple[tuple[Outbound, str | None], ...] = ()  # (row, flow_id)
    proof: ProofKey | None = None
    proof_fate: Literal["spend", "release"] | None = None
    proof_verdict: Mapping[str, Any] | None = None
    sender: str | None = None
    protocol_id: str | None = None
    replay_fate: Literal["done", "release"] | None = None
    # Not answered (an RFC 3834 signal, a rate or loop limit): the outbox rows are written
    # `held` with this reason as their last error, and never drained.
    hold: str | None = None
    # A job taken on by this step (envelopay.ledger.jobs), or a job's move written with
    # its answer: in the same transaction, so the work is never forgotten and its answer
    # goes out once (a move whose job is not in its from_states: "lost", nothing written).
    job_new: Job | None = None
    job_move: JobMove | None = None


CommitResult = Literal["ok", "conflict", "lost"]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    outbound: Outbound
    flow_id: str | None
    status: Literal["pending", "sent", "failed", "bounced", "held"]
    attempts: int
    created_at: datetime
    next_attempt: datetime | None = None
    sent_at: datetime | None = None
    last_error: str | None = None
    bounce_status: str | None = None  # the DSN's Status code (RFC 3464), e.g. "5.1.1"


@dataclass(frozen=True, slots=True)
class CallRecord:
    call_id: str
    local: str
    peer: str
    message_id: str
    deadline: datetime
    status: CallStatus = "pending"
    request: Mapping[str, Any] = field(default_factory=dict)
    result: Mapping[str, Any] | None = None
    created_at: datetime | None = None
    resolved_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FlowCount:
    kind: str
    state: str
    count: int


@dataclass(frozen=True, slots=True)
class FlowFilter:
    """Which flows a listing keeps; None keeps every value."""

    peer: str | None = None
    kind: str | None = None
    state: str | None = None


@dataclass(frozen=True, slots=True)
class OopsSent:
    """One OOPS this agent wrote to its outbox (answered in a flow, or before any flow)."""

    at: datetime
    message_id: str
    recipient: str
    code: str | None
    note: str
    flow_id: str | None
    status: str  # the outbox row's: pending, sent, failed, bounced, held


@dataclass(frozen=True, slots=True)
class JobLine:
    """What the console shows of one job (ledger/jobs.py's row, in part)."""

    job_id: str
    flow_id: str
    peer: str
    task: str
    state: str
    chain: str | None
    token: str | None
    amount: int
    error: str | None
    refund: Mapping[str, Any] | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class RefundLine:
    """What the console shows of one refund (ledger/refunds.py's row, in part)."""

    key: str
    flow_id: str | None
    peer: str
    chain: str
    token: str
    amount: int
    reason: str
    status: str
    tx_id: str | None
    updated_at: datetime


@runtime_checkable
class Summaries(Protocol):
    """The read-only summaries of one agent's ledger the worker's console shows
    (envelopay.ledger.summaries `SummariesMixin`, on both backends)."""

    def flow_counts(self, local: str) -> list[FlowCount]: ...

    def change_mark(self, local: str) -> tuple[str, ...]: ...

    def find_flows(
        self, local: str, where: FlowFilter, limit: int = 50, before: tuple[datetime, str] | None = None
    ) -> list[FlowRecord]: ...

    def flow_log(self, flow_id: str) -> list[LogEntry]: ...

    def get_flow(self, flow_id: str) -> FlowRecord | None: ...

    def paid_entries(self, local: str, since: datetime) -> list[LogEntry]: ...

    def oops_counts(self, local: str, since: datetime) -> dict[str, int]: ...

    def oops_recent(self, local: str, limit: int = 20) -> list[OopsSent]: ...

    def job_counts(self, local: str) -> dict[str, int] | None: ...

    def recent_jobs(self, local: str, limit: int = 20, states: tuple[str, ...] = ()) -> list[JobLine]: ...

    def refund_counts(self, local: str) -> dict[str, int] | None: ...

    def refunds_paid_since(self, local: str, since: datetime) -> list[RefundLine]: ...

    def recent_refunds(self, local: str, limit: int = 20) -> list[RefundLine]: ...


@runtime_checkable
class Store(Summaries, Protocol):
    """The ledger. Synchronous; safe to share between processes (not between threads
    without the backend's own pooling). All times are timezone-aware."""

    # -- lifecycle
    def migrate(self) -> int:
        """Create or upgrade the schema; return the schema version now in place."""
        ...

    def close(self) -> None: ...

    # -- the inbound step
    def begin_step(self, claim: Claim) -> Begin: ...

    def commit_step(self, commit: Commit) -> CommitResult: ...

    # -- reading (get_flow and flow_log: Summaries')
    def list_flows(
        self, local: str | None = None, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[FlowRecord]:
        """Newest first (updated_at, then flow_id, descending); `before` = (updated_at, flow_id)
        of the previous page's last flow."""
        ...

    def flow_for_message(self, local: str, message_id: str) -> FlowRecord | None: ...

    def flow_for_ref(self, local: str, peer: str, author: str, protocol_id: str) -> FlowRecord | None: ...

    def inbound_outcome(self, local: str, message_id: str) -> Mapping[str, Any] | None: ...

    def answer_take(
        self, local: str, peer: str, thread: str, message_id: str, now: datetime, limits: AnswerLimits
    ) -> AnswerVerdict:
        """Draw one automatic answer to `peer` in `thread` for the inbound `message_id`:
        "ok" (recorded; the same message_id drawing again is "ok" without a second
        record), or the limit it would pass. One write transaction, serialized per
        (local, peer), so workers on one ledger share the counts."""
        ...

    def proof_status(self, proof: ProofKey) -> str | None:
        """ "held", "spent", or None when the proof was never reserved (or released)."""
        ...

    # -- the outbox (drained by the agent's sender)
    def outbox_pending(self, now: datetime, limit: int = 100) -> list[OutboxRow]: ...

    def outbox_held(self, local: str, limit: int = 100) -> list[OutboxRow]:
        """The answers `local` did not send (RFC 3834, a limit: `Commit.hold`), newest
        first; never drained."""
        ...

    def outbox_claim(
        self, owner: str, now: datetime, lease_until: datetime, limit: int = 100
    ) -> list[OutboxRow]:
        """Claim due rows for `owner` until `lease_until` (one conditional update); a row
        under another owner's live claim is never handed out. Marking a row sent or
        failed ends its claim; a lease that runs out (a crashed drainer) frees it."""
        ...

    def outbox_claimable(self, owner: str, now: datetime, limit: int) -> list[str]:
        """The Message-IDs of the first `limit` rows (outbox order) pending, due and under
        no live claim but `owner`'s, read: a later `outbox_claim(owner, now)` hands out no other."""
        ...

    def outbox_claim_one(
        self, message_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> OutboxRow | None:
        """Claim the row `message_id` alone, when pending, due, under no live claim (not
        even `owner`'s) and no earlier row of its flow is pending; None otherwise."""
        ...

    def outbox_release(self, message_id: str, owner: str) -> bool: ...

    def outbox_expedite(self) -> int:
        """Make every pending row due now (an operator's `envelopay drain`: backoff
        waived); returns how many rows were waiting for a later attempt."""
        ...

    def outbox_get(self, message_id: str) -> OutboxRow | None: ...

    def mark_sent(self, message_id: str, now: datetime) -> bool: ...

    def mark_failed(
        self, message_id: str, now: datetime, error: str, retry_at: datetime | None = None
    ) -> bool:
        """Record a failed attempt; with `retry_at` the row stays pending until then,
        without it the failure is permanent."""
        ...

    def mark_bounced(self, message_id: str, now: datetime, status: str, detail: str) -> bool:
        """A DSN came back for this row: status 'bounced' with the DSN's status code
        (a single conditional update; False if there is no such row or it is already
        recorded as bounced)."""
        ...

    # -- transport events handled once (an AgentMail webhook's event id), and the ids a
    #    transport must remember (an AgentMail message id for an RFC 5322 Message-ID)
    def event_done(
        self, source: str, event_id: str, now: datetime, data: Mapping[str, Any] | None = None
    ) -> bool:
        """Record the event as handled (with `data`); False if it already was (the
        first record stays)."""
        ...

    def event_seen(self, source: str, event_id: str) -> bool: ...

    def event_data(self, source: str, event_id: str) -> Mapping[str, Any] | None:
        """The data recorded with the event, or None (not recorded, or without data)."""
        ...

    # -- outstanding calls of the email-as-tool client
    def call_add(self, call: CallRecord) -> None: ...

    def call_get(self, call_id: str) -> CallRecord | None: ...

    def call_for_reply(self, local: str, in_reply_to: str) -> CallRecord | None: ...

    def call_resolve(
        self, call_id: str, status: CallStatus, result: Mapping[str, Any] | None, now: datetime
    ) -> bool:
        """Settle a pending call (a single conditional update); False if already settled."""
        ...

    def calls_pending(self, local: str | None = None) -> list[CallRecord]: ...

    def calls_expire(self, now: datetime) -> list[CallRecord]:
        """Mark every pending call past its deadline `timeout` and return them."""
        ...

    # -- jobs (envelopay.ledger.jobs; the states are envelopay.worker.job_states)
    def job_add(self, job: Job) -> bool:
        """Write a job outside a step; False when its flow already has one."""
        ...

    def job_move(self, move: JobMove) -> bool:
        """Apply `move` when the job is in one of its from_states; False otherwise."""
        ...

    def job_get(self, job_id: str) -> Job | None: ...

    def job_for_flow(self, flow_id: str) -> Job | None: ...

    def job_list(
        self, local: str | None = None, states: Sequence[str] | None = None, limit: int = 100,
        *, unanswered: bool = False,
    ) -> list[Job]:
        """Newest first; `unanswered`: only jobs whose answer has not been written."""
        ...

    def job_claim(
        self, owner: str, local: str, task: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[tuple[Job, bool]]:
        """Up to `limit` due jobs of `task` (queued, or running under a lease that ran
        out), now running under `owner`'s lease; each with whether it was taken over."""
        ...

    def job_renew(self, job_id: str, owner: str, lease_until: datetime) -> bool: ...


def outbound_to_row(ob: Outbound) -> dict[str, Any]:
    """The columns an outbox row stores: everything `Outbound` holds."""
    return {
        "message_id": ob.message_id,
        "sender": ob.sender,
        "recipient": ob.recipient,
        "type": ob.message.type,
        "body": ob.message.model_dump(mode="json"),
        "date": ob.date,
        "in_reply_to": ob.in_reply_to,
        "refs": list(ob.references),
        "note": ob.note,
        "auto_submitted": ob.auto_submitted,
    }


_AUTO: dict[str, AutoSubmitted] = {AUTO_REPLIED: AUTO_REPLIED, AUTO_GENERATED: AUTO_GENERATED}


def outbound_from_row(
    *,
    message_id: str,
    sender: str,
    recipient: str,
    type: str,
    body: Mapping[str, Any],
    date: datetime,
    in_reply_to: str | None,
    refs: Sequence[str],
    note: str | None,
    auto_submitted: str | None = None,
) -> Outbound:
    model = model_for(MessageType(type))
    message = model.model_validate(dict(body), strict=False)
    return Outbound(
        sender=sender,
        recipient=recipient,
        message=message,  # type: ignore[arg-type]
        message_id=message_id,
        date=date,
        in_reply_to=in_reply_to,
        references=tuple(refs),
        note=note,
        auto_submitted=_AUTO.get(auto_submitted or ""),
    )
