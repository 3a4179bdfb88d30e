"""The engine: the inbound path of DESIGN.md, up to the outbox commit.

    raw → parse → DKIM policy → ledger.begin_step (claim Message-ID, reserve (sender, id)
    and the proof key, find the flow) → flows.step → actions (rail.verify, the
    application's decisions, replies through the table) → ledger.commit_step (state +
    log + outbox, one transaction) → Outcome

No write transaction is open while a rail verifies or the application decides. A
crash between the two transactions leaves the claim and the reservations owned by the
message, so the same message redoes the step when it comes back. Remote mistakes
become OOPS codes here and only here; an OOPS is never answered with an OOPS, and
mail that does not speak the protocol is never answered at all.

The client role uses `send()`: the outgoing message is stepped through the same
tables (direction "out"), so the buyer's flow state is tracked too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal, Protocol, TypeAlias

from envelopay import flows
from envelopay.dkim import DkimResult, apply_policy
from envelopay.errors import UsageError
from envelopay.flows import Action, Direction, FlowKind, FlowState, Side, Step
from envelopay.ledger.store import (
    Begin,
    Claim,
    Commit,
    FlowRecord,
    FlowWrite,
    LogEntry,
    ProofKey,
    Store,
)
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import KEYWORDS
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Invoice,
    Message,
    MessageType,
    Methods,
    Offer,
    Oops,
    OopsError,
    Order,
    Pay,
    Which,
    is_proof_carrying,
)
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parsed import Parsed
from envelopay.rails.interface import Expectation, Rail, Verdict

__all__ = [
    "Application",
    "BaseApplication",
    "Context",
    "Engine",
    "Notice",
    "Outcome",
    "Refuse",
    "Sent",
]

_log = logging.getLogger(__name__)

DkimPolicy = Literal["required", "prefer", "off"]

# A PAY against an INVOICE must carry a transfer made after the INVOICE (see
# Engine._not_before); this much drift between our clock and the chain's is allowed.
INVOICE_SKEW = timedelta(minutes=10)
INVOICE_ISSUED_AT = "invoice_issued_at"  # flow fact, ISO 8601, written when we send an INVOICE
OutcomeStatus = Literal[
    "processed",  # a transition happened (perhaps with a reply)
    "refused",  # answered with an OOPS (or silently, for an OOPS), nothing changed
    "ignored",  # not protocol mail, or nothing to answer
    "busy",  # another worker holds this message's claim; leave it for later
    "deferred",  # DKIM key lookup failed temporarily; leave it for later
]
Repeat = Literal["message_id", "retransmission"]


@dataclass(frozen=True, slots=True)
class Refuse:
    """An application's refusal: becomes an OOPS with this code."""

    code: OopsCode
    note: str = ""


Decision: TypeAlias = "Message | Refuse | OopsCode | None"


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


class Application(Protocol):
    """What a worker (or a client) decides. Results are data; raising is a bug, which
    the engine answers with OOPS task_failed."""

    def wallet(self, chain: str, token: str) -> str | None:
        """Our receiving wallet for an asset, or None when we do not take it."""
        ...

    async def methods(self, which: Which, ctx: Context) -> Methods | None: ...

    async def order(
        self, order: Order, ctx: Context, *, paid: int | None
    ) -> Invoice | Fulfill | Refuse | OopsCode | None:
        """An ORDER arrived: quote it (INVOICE), do it now (FULFILL, free or prepaid with
        `paid` verified units), or refuse it."""
        ...

    async def fulfill(self, order: Order, pay: Pay, ctx: Context) -> Fulfill | Refuse | OopsCode: ...

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


@dataclass(frozen=True, slots=True)
class Outcome:
    """What handling one inbound message did."""

    status: OutcomeStatus
    message_id: str | None = None
    flow_id: str | None = None
    state: str | None = None
    oops: OopsCode | None = None
    detail: str = ""
    outbox: tuple[str, ...] = ()  # Message-IDs of the replies written to the outbox
    verdict: Mapping[str, Any] | None = None
    repeat: Repeat | None = None  # set when this is a recorded outcome handed back again

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message_id": self.message_id,
            "flow_id": self.flow_id,
            "state": self.state,
            "oops": self.oops.value if self.oops else None,
            "detail": self.detail,
            "outbox": list(self.outbox),
            "verdict": dict(self.verdict) if self.verdict is not None else None,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], repeat: Repeat | None = None) -> Outcome:
        return cls(
            status=data["status"],
            message_id=data.get("message_id"),
            flow_id=data.get("flow_id"),
            state=data.get("state"),
            oops=OopsCode(data["oops"]) if data.get("oops") else None,
            detail=data.get("detail", ""),
            outbox=tuple(data.get("outbox", ())),
            verdict=data.get("verdict"),
            repeat=repeat,
        )


@dataclass(frozen=True, slots=True)
class Sent:
    """What `Engine.send` recorded: the flow and the outbox row's Message-ID."""

    flow_id: str
    state: str
    message_id: str
    outbound: Outbound


@dataclass(slots=True)
class _Work:
    """The mutable result of one inbound step, before the commit."""

    fs: FlowState
    flow_id: str
    version: int
    peer: str
    replies: list[Outbound] = field(default_factory=list)
    log: list[LogEntry] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    verdict: Verdict | None = None
    proof_fate: Literal["spend", "release"] | None = None
    replay_fate: Literal["done", "release"] = "done"
    oops: OopsCode | None = None
    detail: str = ""
    persist: bool = True
    start: FlowState | None = None  # the flow as read, to skip a write that changes nothing


_REF_FIELDS = ("order_ref", "invoice_ref", "offer_ref", "which_ref")
_MAX_CONFLICT_RETRIES = 8


def content_hash(parsed: Parsed) -> str:
    """The identity of a message's protocol content: its type and body, canonically."""
    doc = {"type": parsed.type.value if parsed.type else None, "body": parsed.body}
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _default_parser(raw: bytes) -> Parsed:
    from envelopay.protocol.parse import parse

    return parse(raw)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _random_id() -> str:
    return secrets.token_hex(10)


class Engine:
    """One mailbox's engine. `rails` maps a chain name to the rail that serves it."""

    def __init__(
        self,
        store: Store,
        *,
        address: str,
        domain: str,
        rails: Mapping[str, Rail],
        app: Application,
        dkim_policy: DkimPolicy = "prefer",
        clock: Callable[[], datetime] = _utcnow,
        id_factory: Callable[[], str] = _random_id,
        worker_id: str | None = None,
        lease: timedelta = timedelta(seconds=120),
        parser: Callable[[bytes], Parsed] = _default_parser,
        proof_window: timedelta | None = None,
        invoice_skew: timedelta | None = INVOICE_SKEW,
    ) -> None:
        self.store = store
        self.address = address.lower()
        self.domain = domain
        self.rails = dict(rails)
        self.app = app
        self.dkim_policy: DkimPolicy = dkim_policy
        self.clock = clock
        self.id_factory = id_factory
        # A restarted worker keeps its id so it may redo its own claims at once; another
        # worker waits for the lease to run out.
        self.worker_id = worker_id or f"w-{secrets.token_hex(6)}"
        self.lease = lease
        self.parser = parser
        self.proof_window = proof_window
        self.invoice_skew = invoice_skew

    # ------------------------------------------------------------------ ids
    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.id_factory()}"

    def new_message_id(self) -> str:
        return f"<{self.id_factory()}@{self.domain}>"

    # ------------------------------------------------------------------ inbound
    async def handle(self, raw: bytes, *, dkim: DkimResult | None = None) -> Outcome:
        parsed = self.parser(raw)
        fallback = f"<sha256.{hashlib.sha256(raw).hexdigest()[:40]}@unidentified>"
        return await self.handle_parsed(parsed, dkim=dkim, fallback_message_id=fallback)

    async def handle_parsed(
        self,
        parsed: Parsed,
        *,
        dkim: DkimResult | None = None,
        fallback_message_id: str | None = None,
    ) -> Outcome:
        message_id = parsed.message_id or fallback_message_id
        sender = parsed.from_addr.lower() if parsed.from_addr else None
        if not parsed.protocol or sender is None or message_id is None:
            # Never reply to non-protocol mail (nor to mail we cannot address a reply to).
            return Outcome("ignored", message_id, detail="not protocol mail")
        message = parsed.message if parsed.valid else None

        early: tuple[OopsCode, str] | None = None
        if message is None:
            if parsed.oops is not None:
                early = (parsed.oops, "; ".join(p.detail for p in parsed.problems)[:500])
        else:
            decision = apply_policy(
                dkim or DkimResult("none"), self.dkim_policy, proof_carrying=is_proof_carrying(message)
            )
            if decision.action == "defer":
                return Outcome("deferred", message_id, detail=decision.reason)
            if decision.action == "reject":
                early = (OopsCode.DKIM_FAILED, decision.reason)

        proof_key: ProofKey | None = None
        if message is not None and early is None:
            proof_key, problem = self._proof_key(message)
            if problem is not None:
                early = problem

        for _ in range(_MAX_CONFLICT_RETRIES):
            now = self.clock()
            claimable = message is not None and early is None
            claim = Claim(
                local=self.address,
                message_id=message_id,
                content_hash=content_hash(parsed),
                worker=self.worker_id,
                now=now,
                lease_until=now + self.lease,
                sender=sender if claimable else None,
                protocol_id=parsed.id if claimable else None,
                proof=proof_key if claimable else None,
                refs=self._typed_refs(message) if claimable and message is not None else (),
                thread=self._thread(parsed) if claimable else (),
            )
            begin = self.store.begin_step(claim)
            if begin.status == "seen":
                assert begin.outcome is not None
                return Outcome.from_json(begin.outcome, repeat="message_id")
            if begin.status == "busy":
                return Outcome("busy", message_id, detail="claimed by another worker")
            if begin.status == "retransmission":
                assert begin.outcome is not None
                return replace(
                    Outcome.from_json(begin.outcome, repeat="retransmission"),
                    message_id=message_id,
                    outbox=begin.requeued,
                )
            if early is not None or message is None:
                result = await self._refuse_early(parsed, message_id, sender, early, claimable, now)
            elif begin.status == "duplicate_id":
                result = await self._refuse_early(
                    parsed,
                    message_id,
                    sender,
                    (OopsCode.DUPLICATE_ID, "id reused with other content"),
                    False,
                    now,
                )
            elif begin.status == "proof_replayed":
                result = await self._refuse_early(
                    parsed,
                    message_id,
                    sender,
                    (OopsCode.PROOF_REPLAYED, "this proof was already presented"),
                    True,
                    now,
                )
            else:
                result = await self._step(parsed, message, message_id, sender, begin, proof_key, now)
            if result is not None:
                return result
        raise RuntimeError(f"flow kept changing under {message_id}; gave up after retries")

    def _typed_refs(self, message: Message) -> tuple[str, ...]:
        refs = [getattr(message, f, None) for f in _REF_FIELDS]
        if isinstance(message, Oops):
            refs.append(message.ref)
        return tuple(r for r in refs if isinstance(r, str))

    @staticmethod
    def _thread(parsed: Parsed) -> tuple[str, ...]:
        ids: list[str] = []
        if parsed.in_reply_to:
            ids.append(parsed.in_reply_to)
        ids.extend(r for r in reversed(parsed.references) if r not in ids)
        return tuple(ids)

    def _proof_key(self, message: Message) -> tuple[ProofKey | None, tuple[OopsCode, str] | None]:
        if not is_proof_carrying(message):
            return None, None
        chain, proof = _proof_of(message)
        rail = self.rails.get(chain)
        if rail is None:
            return None, (OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {chain!r} here")
        try:
            return ProofKey(chain, rail.proof_key(proof)), None
        except ValueError as exc:
            return None, (OopsCode.INVALID_FIELD, f"proof: {exc}")

    # --------------------------------------------------------------- refusals
    def _oops(self, code: OopsCode, note: str, ref: str | None) -> Oops:
        text = f"{code.value}: {note}" if note else code.value
        # A received id becomes our `ref` only when it is a valid id (it may be "" or huge).
        safe_ref = ref if isinstance(ref, str) and 0 < len(ref) <= 256 else None
        if code is OopsCode.UNKNOWN_TYPE:
            # Spec: reply OOPS with unknown_type "and the list of supported types".
            error = OopsError(code=code.value, supported=list(KEYWORDS))
            text = f"{text} (supported: {', '.join(KEYWORDS)})"
        else:
            error = OopsError(code=code.value)
        return Oops(note=text[:1000], id=self.new_id("oops"), error=error, ref=safe_ref)

    def _reply(self, parsed: Parsed, to: str, message: Message, now: datetime) -> Outbound:
        in_reply_to, refs = _reply_headers(parsed)
        return Outbound(
            sender=self.address,
            recipient=to,
            message=message,
            message_id=self.new_message_id(),
            date=now,
            in_reply_to=in_reply_to,
            references=refs,
        )

    async def _refuse_early(
        self,
        parsed: Parsed,
        message_id: str,
        sender: str,
        problem: tuple[OopsCode, str] | None,
        owns_replay: bool,
        now: datetime,
        release: ProofKey | None = None,
    ) -> Outcome | None:
        """Refuse before any flow is touched: parse problems, DKIM, replays, threading.
        `release` is a proof reserved for this message but never judged."""
        code, detail = problem if problem is not None else (None, "")
        replies: tuple[Outbound, ...] = ()
        # An OOPS, or a message the parser says answers nothing, gets silence.
        # An unknown keyword (type None) is answered too: the spec asks for unknown_type.
        if code is not None and parsed.type is not MessageType.OOPS:
            replies = (self._reply(parsed, sender, self._oops(code, detail, parsed.id), now),)
        outcome = Outcome(
            "refused" if code is not None else "ignored",
            message_id,
            oops=code,
            detail=detail,
            outbox=tuple(r.message_id for r in replies),
        )
        commit = Commit(
            local=self.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=message_id,
            worker=self.worker_id,
            outbox=tuple((r, None) for r in replies),
            sender=sender if owns_replay else None,
            protocol_id=parsed.id if owns_replay else None,
            replay_fate="done" if owns_replay else None,
            proof=release,
            proof_fate="release" if release is not None else None,
        )
        return self._finish(commit, outcome, message_id)

    def _finish(self, commit: Commit, outcome: Outcome, message_id: str) -> Outcome | None:
        result = self.store.commit_step(commit)
        if result == "ok":
            return outcome
        if result == "lost":
            recorded = self.store.inbound_outcome(self.address, message_id)
            if recorded is not None:
                return Outcome.from_json(recorded, repeat="message_id")
            return Outcome("busy", message_id, detail="claim lost to another worker")
        return None  # version conflict: the caller redoes the step

    # ------------------------------------------------------------------ step
    def _resolve(
        self, message: Message, sender: str, begin: Begin, parsed: Parsed
    ) -> tuple[FlowRecord | None, tuple[OopsCode, str] | None]:
        ref_flows = {f.flow_id: f for f in begin.ref_flows if f.peer == sender}
        if len(ref_flows) > 1:
            return None, (OopsCode.THREAD_CONFLICT, "typed refs name different flows")
        by_ref = next(iter(ref_flows.values()), None)
        by_thread: FlowRecord | None = None
        for _mid, f in begin.thread_flows:
            if f.peer == sender:
                by_thread = f
                break
        reply_flow = next((f for mid, f in begin.thread_flows if mid == parsed.in_reply_to), None)
        if (
            by_ref is not None
            and reply_flow is not None
            and reply_flow.peer == sender
            and reply_flow.flow_id != by_ref.flow_id
        ):
            return None, (OopsCode.THREAD_CONFLICT, "refs and In-Reply-To name different flows")
        return by_ref or by_thread, None

    async def _step(
        self,
        parsed: Parsed,
        message: Message,
        message_id: str,
        sender: str,
        begin: Begin,
        proof_key: ProofKey | None,
        now: datetime,
    ) -> Outcome | None:
        record, conflict = self._resolve(message, sender, begin, parsed)
        work: _Work | None = None
        refusal: tuple[OopsCode | None, str] | None = conflict
        if refusal is None:
            opened = flows.opening(message, Direction.IN)
            if record is not None:
                fs = FlowState(FlowKind(record.kind), Side(record.side), record.state, record.data)
                joined_by_ref = bool(begin.ref_flows)
                if not joined_by_ref and opened is not None and not flows.accepts(fs, message, Direction.IN):
                    # Threaded under an old flow but opening a new one (a repeat customer
                    # replying in the same thread): a new flow.
                    record = None
                else:
                    work = _Work(fs, record.flow_id, record.version, sender)
            if work is None:
                if opened is None:
                    unknown = begin.missing_refs or parsed.in_reply_to
                    missing = OopsCode.UNKNOWN_REF if unknown else OopsCode.UNEXPECTED_MESSAGE
                    refusal = (missing, "this message joins no flow of ours")
                else:
                    work = _Work(opened, self.new_id("flow"), 0, sender)
        if work is None:
            assert refusal is not None
            said = None if isinstance(message, Oops) else refusal[0]
            return await self._refuse_early(
                parsed, message_id, sender, (said, refusal[1]) if said else None, True, now, release=proof_key
            )

        step = flows.step(work.fs, message, Direction.IN)
        in_entry = LogEntry(
            work.flow_id,
            now,
            "in",
            message.type,
            message_id,
            parsed.id,
            sender,
            self.address,
            message.model_dump(mode="json"),
        )
        if not step.ok:
            return await self._commit_refusal(
                parsed, message, message_id, sender, work, step, proof_key, in_entry, now
            )

        await self._run_actions(parsed, message, step, work, proof_key, now)
        return await self._commit_work(
            parsed, message, message_id, sender, work, step, proof_key, in_entry, now
        )

    async def _commit_refusal(
        self,
        parsed: Parsed,
        message: Message,
        message_id: str,
        sender: str,
        work: _Work,
        step: Step,
        proof_key: ProofKey | None,
        in_entry: LogEntry,
        now: datetime,
    ) -> Outcome | None:
        # A message that does not fit: its code (or silence), the state as it was. It is
        # logged in an existing flow; a flow it would have opened is not created.
        replies: list[Outbound] = []
        if step.oops is not None and not isinstance(message, Oops):
            replies.append(self._reply(parsed, sender, self._oops(step.oops, step.detail, parsed.id), now))
        existing = work.version > 0
        outcome = Outcome(
            "refused",
            message_id,
            flow_id=work.flow_id if existing else None,
            state=work.fs.state if existing else None,
            oops=step.oops,
            detail=step.detail,
            outbox=tuple(r.message_id for r in replies),
        )
        log = [replace(in_entry, oops=step.oops.value if step.oops else None)]
        log += [self._out_entry(work.flow_id, r, now) for r in replies]
        commit = Commit(
            local=self.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=message_id,
            worker=self.worker_id,
            log=tuple(log) if existing else (),
            outbox=tuple((r, work.flow_id if existing else None) for r in replies),
            proof=proof_key,
            proof_fate="release" if proof_key is not None else None,  # never judged: not spent
            sender=sender,
            protocol_id=parsed.id,
            replay_fate="done",
        )
        return self._finish(commit, outcome, message_id)

    def _out_entry(self, flow_id: str, ob: Outbound, now: datetime) -> LogEntry:
        oops = ob.message.error.code if isinstance(ob.message, Oops) and ob.message.error else None
        return LogEntry(
            flow_id,
            now,
            "out",
            ob.message.type,
            ob.message_id,
            getattr(ob.message, "id", None),
            ob.sender,
            ob.recipient,
            ob.message.model_dump(mode="json"),
            oops=oops,
        )

    def _ctx(self, work: _Work, now: datetime) -> Context:
        return Context(
            local=self.address,
            peer=work.peer,
            flow_id=work.flow_id,
            kind=work.fs.kind,
            state=work.fs.state,
            data=work.fs.data,
            now=now,
            new_id=self.new_id,
            verdict=work.verdict,
        )

    async def _verify(self, message: Message, step: Step, work: _Work) -> tuple[OopsCode, str] | None:
        check = step.proof
        assert check is not None
        rail = self.rails.get(check.chain)
        if rail is None:
            return OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {check.chain!r}"
        ours = self.app.wallet(check.chain, check.token)
        recipient = check.recipient
        if recipient is None:
            if ours is None:
                return OopsCode.UNSUPPORTED_RAIL, f"we take no {check.token} on {check.chain}"
            recipient = ours
        elif isinstance(message, Offer) and recipient != ours:
            # The give leg must have paid us, not someone else.
            return OopsCode.RECIPIENT_MISMATCH, "the OFFER's give leg did not pay our wallet"
        now = self.clock()
        expectation = Expectation(
            chain=check.chain,
            token=check.token,
            amount=check.amount,
            recipient=recipient,
            not_before=self._not_before(message, work.fs.data, now),
        )
        try:
            verdict = await rail.verify(check.proof, expectation)
        except Exception as exc:  # a rail bug or a broken transport: retry later, never spend
            _log.exception("rail %s raised while verifying", rail.name)
            verdict = Verdict.unavailable(f"rail raised {type(exc).__name__}")
        work.verdict = verdict
        if verdict.ok:
            work.proof_fate = "spend"
            return None
        if verdict.status in ("pending", "unavailable"):
            # Not judged: the proof may be presented again, and so may the (sender, id).
            work.proof_fate = "release"
            work.replay_fate = "release"
        else:
            work.proof_fate = "spend"  # a rejected proof stays spent
        code = verdict.oops or OopsCode.RAIL_UNAVAILABLE
        return code, verdict.detail or code.value

    def _not_before(self, message: Message, data: Mapping[str, Any], now: datetime) -> datetime | None:
        """The earliest transaction time a proof may carry.

        A PAY that settles an INVOICE must be a transfer made after the INVOICE was
        issued (less `invoice_skew` for clock drift between us and the chain): an older
        transfer to the same wallet for the same amount, never claimed by mail, must not
        pay a new INVOICE. `proof_window` optionally bounds every proof's age."""
        bounds: list[datetime] = []
        if self.proof_window is not None:
            bounds.append(now - self.proof_window)
        issued = data.get(INVOICE_ISSUED_AT)
        if isinstance(message, Pay) and self.invoice_skew is not None and isinstance(issued, str):
            bounds.append(datetime.fromisoformat(issued) - self.invoice_skew)
        return max(bounds) if bounds else None

    async def _ask(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            return await fn()
        except Exception as exc:
            _log.exception("application handler raised")
            return Refuse(OopsCode.TASK_FAILED, f"handler raised {type(exc).__name__}")

    async def _run_actions(
        self,
        parsed: Parsed,
        message: Message,
        step: Step,
        work: _Work,
        proof_key: ProofKey | None,
        now: datetime,
    ) -> None:
        before = work.fs
        work.fs = FlowState(before.kind, before.side, step.state, step.data)
        if not isinstance(message, Oops):
            # Our later sends in this flow reply to its latest substantive message.
            data = dict(step.data)
            data["last_in"] = {"message_id": parsed.message_id, "references": list(_reply_headers(parsed)[1])}
            work.fs = replace(work.fs, data=data)
        work.start = before
        for action in step.actions:
            decision: Any = None
            if action is Action.VERIFY_PROOF:
                failed = await self._verify(message, step, work)
                if failed is not None:
                    work.oops, work.detail = failed
                    work.persist = False  # the message did not happen, as far as the flow goes
                    return
                continue
            if action is Action.NOTIFY:
                work.notices.append(
                    Notice(
                        work.flow_id,
                        work.fs.kind,
                        work.fs.side,
                        work.fs.state,
                        work.peer,
                        message,
                        parsed.message_id,
                        work.verdict,
                    )
                )
                continue
            ctx = self._ctx(work, now)
            if action is Action.DECIDE_METHODS:
                assert isinstance(message, Which)
                decision = await self._ask(partial(self.app.methods, message, ctx))
            elif action is Action.DECIDE_ORDER:
                assert isinstance(message, Order)
                paid = work.verdict.observed_amount if work.verdict is not None else None
                decision = await self._ask(partial(self.app.order, message, ctx, paid=paid))
            elif action is Action.FULFILL:
                assert isinstance(message, Pay)
                order = _order_of(work.fs.data)
                if order is None:
                    decision = Refuse(OopsCode.TASK_FAILED, "no ORDER recorded in this flow")
                else:
                    decision = await self._ask(partial(self.app.fulfill, order, message, ctx))
            elif action is Action.DECIDE_OFFER:
                assert isinstance(message, Offer)
                decision = await self._ask(partial(self.app.offer, message, ctx))
            self._apply_decision(parsed, decision, work, now)

    def _apply_decision(self, parsed: Parsed, decision: Any, work: _Work, now: datetime) -> None:
        if decision is None:
            return  # silence is always valid
        if isinstance(decision, OopsCode):
            decision = Refuse(decision)
        if isinstance(decision, Refuse):
            oops = self._oops(decision.code, decision.note, parsed.id)
            work.replies.append(self._reply(parsed, work.peer, oops, now))
            work.oops, work.detail = decision.code, decision.note
            return
        out_step = flows.step(work.fs, decision, Direction.OUT)
        if not out_step.ok:
            _log.error(
                "application answered %s, which the %s table refuses in state %s",
                decision.type,
                work.fs.kind,
                work.fs.state,
            )
            oops = self._oops(OopsCode.TASK_FAILED, "the worker could not answer", parsed.id)
            work.replies.append(self._reply(parsed, work.peer, oops, now))
            work.oops, work.detail = OopsCode.TASK_FAILED, f"illegal reply {decision.type}"
            return
        data = _stamp_invoice(decision, out_step.data, now)
        work.fs = FlowState(work.fs.kind, work.fs.side, out_step.state, data)
        work.replies.append(self._reply(parsed, work.peer, decision, now))

    async def _commit_work(
        self,
        parsed: Parsed,
        message: Message,
        message_id: str,
        sender: str,
        work: _Work,
        step: Step,
        proof_key: ProofKey | None,
        in_entry: LogEntry,
        now: datetime,
    ) -> Outcome | None:
        verdict_json = work.verdict.to_json() if work.verdict is not None else None
        if not work.persist:
            # Verification failed: OOPS, no state change; the proof's fate is recorded.
            assert work.oops is not None
            replies = [self._reply(parsed, sender, self._oops(work.oops, work.detail, parsed.id), now)]
            existing = work.version > 0
            as_read = work.start if work.start is not None else work.fs  # nothing was written
            outcome = Outcome(
                "refused",
                message_id,
                flow_id=work.flow_id if existing else None,
                state=as_read.state if existing else None,
                oops=work.oops,
                detail=work.detail,
                outbox=tuple(r.message_id for r in replies),
                verdict=verdict_json,
            )
            log = [replace(in_entry, verdict=verdict_json, oops=work.oops.value)]
            log += [self._out_entry(work.flow_id, r, now) for r in replies]
            commit = Commit(
                local=self.address,
                now=now,
                outcome=outcome.to_json(),
                message_id=message_id,
                worker=self.worker_id,
                log=tuple(log) if existing else (),
                outbox=tuple((r, work.flow_id if existing else None) for r in replies),
                proof=proof_key,
                proof_fate=work.proof_fate,
                proof_verdict=verdict_json,
                sender=sender,
                protocol_id=parsed.id,
                replay_fate=work.replay_fate,
            )
            return self._finish(commit, outcome, message_id)

        unchanged = work.version > 0 and work.fs == work.start
        record = FlowRecord(
            flow_id=work.flow_id,
            local=self.address,
            peer=sender,
            kind=work.fs.kind.value,
            side=work.fs.side.value,
            state=work.fs.state,
            version=work.version,
            data=work.fs.data,
            created_at=now,
            updated_at=now,
        )
        refs: list[tuple[str, str, str, str]] = []
        if parsed.id is not None:
            refs.append((sender, sender, parsed.id, work.flow_id))
        msgids = [(message_id, work.flow_id)]
        for r in work.replies:
            rid = getattr(r.message, "id", None)
            if isinstance(rid, str):
                refs.append((sender, self.address, rid, work.flow_id))
            msgids.append((r.message_id, work.flow_id))
        outcome = Outcome(
            "processed",
            message_id,
            flow_id=work.flow_id,
            state=work.fs.state,
            oops=work.oops,
            detail=work.detail,
            outbox=tuple(r.message_id for r in work.replies),
            verdict=verdict_json,
        )
        log = [replace(in_entry, verdict=verdict_json)]
        log += [self._out_entry(work.flow_id, r, now) for r in work.replies]
        commit = Commit(
            local=self.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=message_id,
            worker=self.worker_id,
            flow=None if unchanged else FlowWrite(record),  # e.g. an OOPS: logged only
            log=tuple(log),
            refs=tuple(refs),
            message_ids=tuple(msgids),
            outbox=tuple((r, work.flow_id) for r in work.replies),
            proof=proof_key,
            proof_fate=work.proof_fate if proof_key is not None else None,
            proof_verdict=verdict_json,
            sender=sender,
            protocol_id=parsed.id,
            replay_fate="done",
        )
        result = self._finish(commit, outcome, message_id)
        if result is not None and result.repeat is None:
            for notice in work.notices:
                notice = replace(notice, state=work.fs.state)
                try:
                    await self.app.notify(notice)
                except Exception:
                    _log.exception("application notify raised")
        return result

    # ----------------------------------------------------------------- outbound
    async def send(
        self,
        message: Message,
        to: str,
        *,
        flow_id: str | None = None,
        in_reply_to: str | None = None,
        references: tuple[str, ...] = (),
        note: str | None = None,
    ) -> Sent:
        """Record an outgoing message in its flow and write its outbox row.

        The flow is `flow_id`, else the one the message's typed refs name, else the one
        `in_reply_to` names, else the flow the message opens. A message the flow's table
        refuses raises UsageError (nothing is written). Threading headers default to a
        reply to the flow's latest inbound message."""
        to = to.lower()
        for _ in range(_MAX_CONFLICT_RETRIES):
            now = self.clock()
            record = self._outbound_flow(message, to, flow_id, in_reply_to)
            if flow_id is not None and record is None:
                raise UsageError(f"no flow {flow_id!r}")
            fs: FlowState | None = None
            version = 0
            if record is not None:
                fs = FlowState(FlowKind(record.kind), Side(record.side), record.state, record.data)
                if (
                    flow_id is None
                    and not self._joins_by_ref(message)
                    and not flows.accepts(fs, message, Direction.OUT)
                ):
                    fs, record = None, None
                else:
                    version = record.version
            if fs is None:
                fs = flows.opening(message, Direction.OUT)
                if fs is None:
                    raise UsageError(
                        f"{message.type.upper()} needs a flow to join (give flow_id or in_reply_to)"
                    )
            step = flows.step(fs, message, Direction.OUT)
            if not step.ok:
                code = step.oops.value if step.oops else "refused"
                raise UsageError(
                    f"{message.type.upper()} does not fit flow state {fs.state}: {code}: {step.detail}"
                )
            fid = record.flow_id if record is not None else self.new_id("flow")
            irt, refs = in_reply_to, references
            last = fs.data.get("last_in")
            if irt is None and record is not None and isinstance(last, Mapping) and last.get("message_id"):
                irt, refs = last["message_id"], tuple(last.get("references", ()))
            ob = Outbound(
                sender=self.address,
                recipient=to,
                message=message,
                message_id=self.new_message_id(),
                date=now,
                in_reply_to=irt,
                references=refs,
                note=note,
            )
            new = FlowRecord(
                flow_id=fid,
                local=self.address,
                peer=to,
                kind=fs.kind.value,
                side=fs.side.value,
                state=step.state,
                version=version,
                data=_stamp_invoice(message, step.data, now),
                created_at=now,
                updated_at=now,
            )
            refs_rows: list[tuple[str, str, str, str]] = []
            pid = getattr(message, "id", None)
            if isinstance(pid, str):
                refs_rows.append((to, self.address, pid, fid))
            outcome = {"status": "sent", "flow_id": fid, "message_id": ob.message_id}
            commit = Commit(
                local=self.address,
                now=now,
                outcome=outcome,
                flow=FlowWrite(new),
                log=(self._out_entry(fid, ob, now),),
                refs=tuple(refs_rows),
                message_ids=((ob.message_id, fid),),
                outbox=((ob, fid),),
            )
            if self.store.commit_step(commit) == "ok":
                return Sent(fid, step.state, ob.message_id, ob)
        raise RuntimeError("flow kept changing while sending; gave up after retries")

    def _joins_by_ref(self, message: Message) -> bool:
        return any(getattr(message, f, None) for f in _REF_FIELDS)

    def _outbound_flow(
        self, message: Message, to: str, flow_id: str | None, in_reply_to: str | None
    ) -> FlowRecord | None:
        if flow_id is not None:
            return self.store.get_flow(flow_id)
        for ref in self._typed_refs(message):
            # Our typed refs name the peer's messages (their ORDER, INVOICE, OFFER, WHICH).
            found = self.store.flow_for_ref(self.address, to, to, ref)
            if found is not None:
                return found
        if in_reply_to is not None:
            found = self.store.flow_for_message(self.address, in_reply_to)
            if found is not None and found.peer == to:
                return found
        return None


def _stamp_invoice(message: Message, data: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """Flow facts after sending `message`; an INVOICE records when it was issued."""
    out = dict(data)
    if isinstance(message, Invoice):
        out[INVOICE_ISSUED_AT] = now.isoformat()
    return out


def _reply_headers(parsed: Parsed) -> tuple[str | None, tuple[str, ...]]:
    from envelopay.protocol.compose import reply_headers

    return reply_headers(parsed)


def _proof_of(message: Message) -> tuple[str, dict[str, Any]]:
    if isinstance(message, Offer):
        return message.give.chain, message.give.proof
    chain = getattr(message, "chain", None)
    proof = getattr(message, "proof", None)
    assert isinstance(chain, str) and isinstance(proof, dict)
    return chain, proof


def _order_of(data: Mapping[str, Any]) -> Order | None:
    body = data.get("order")
    if not isinstance(body, Mapping):
        return None
    return Order.model_validate(dict(body), strict=False)
