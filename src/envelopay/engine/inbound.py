"""The engine: the inbound path of DESIGN.md, up to the outbox commit.

    raw → parse → DKIM policy → ledger.begin_step (claim Message-ID, reserve (sender, id)
    and the proof key, find the flow) → flows.step → actions (rail.verify, the
    application's decisions, replies through the table) → ledger.commit_step (state +
    log + outbox, one transaction) → Outcome

No write transaction is open while a rail verifies or the application decides. A
crash between the two transactions leaves the claim and the reservations owned by the
message, so the same message redoes the step when it comes back. Remote mistakes
become OOPS codes here and only here; an OOPS is never answered with an OOPS, and
mail that does not speak the protocol is recorded with its reason, answered only by the
help note a mailbox may ask for ([answers] help); a person's `Re:` reply in a thread we
started is read by its JSON (refusals.py, SPEC.md "Replies in our thread").

The client role uses `send()` (envelopay.engine.send): the outgoing message is
stepped through the same tables (direction "out"), so the buyer's flow state is
tracked too. The types a step speaks sit beside this module: application.py (what
the application decides), outcome.py (what a step did), records.py (what is logged),
verify.py (the VerifyProof action).
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, Literal

from envelopay import flows
from envelopay.dkim import DkimResult, apply_policy
from envelopay.engine.alignment import _dkim_label, acted_on, dkim_label
from envelopay.engine.application import Application, Context, Enqueue, Notice, Refuse
from envelopay.engine.bounces import bounce_of, bounce_outcome
from envelopay.engine.jobs import job_of
from envelopay.engine.outcome import Outcome
from envelopay.engine.poison import clean_parsed, unstorable_body
from envelopay.engine.records import (
    INVOICE_SKEW,
    MAX_CONFLICT_RETRIES,
    Work,
    content_hash,
    order_of,
    out_entry,
    reply_headers,
    stamp_invoice,
    typed_refs,
)
from envelopay.engine.refund_check import check_refund
from envelopay.engine.status import JobSource, StatusDesk, store_jobs
from envelopay.engine.unusable import refund_excess, refund_unusable
from envelopay.engine.verify import ProofBinding, verify_proof
from envelopay.engine.waiting import park
from envelopay.flows import Action, Direction, FlowKind, FlowState, Side, Step
from envelopay.ledger.store import (
    AnswerLimits,
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
from envelopay.protocol.lenient import lenient_warnings
from envelopay.protocol.messages import (
    Invoice,
    Message,
    Methods,
    Offer,
    Oops,
    Order,
    Pay,
    Which,
    is_proof_carrying,
)
from envelopay.protocol.parse import ParseOptions, parse, parser_options
from envelopay.protocol.parsed import Parsed
from envelopay.rails.binding import BINDING_SCHEME
from envelopay.rails.finality import WaitPolicy
from envelopay.rails.interface import Rail

__all__ = ["DkimPolicy", "Engine"]

_log = logging.getLogger(__name__)

DkimPolicy = Literal["required", "prefer", "off"]
DEFAULT_ANSWER_LIMITS = AnswerLimits()

# begin_step statuses refused at once: ((code, detail), whether this message owns its
# (sender, id) reservation; a reused id belongs to the message that used it first).
_BEGIN_REFUSALS: dict[str, tuple[tuple[OopsCode, str], bool]] = {
    "duplicate_id": ((OopsCode.DUPLICATE_ID, "id reused with other content"), False),
    "proof_replayed": ((OopsCode.PROOF_REPLAYED, "this proof was already presented"), True),
}


def _default_parser(raw: bytes) -> Parsed:
    return parse(raw)


def _reply_parser(parser: Callable[[bytes], Parsed]) -> Callable[[bytes], Parsed]:
    """`parser` with `in_our_thread` on, when it is `parse` with options (the node wires
    the profile so); else `parse` with only that option."""
    options = ParseOptions()
    if isinstance(parser, partial) and parser.func is parse:
        given = parser.keywords.get("options")
        options = given if isinstance(given, ParseOptions) else options
    return partial(parse, options=replace(options, in_our_thread=True))


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _random_id() -> str:
    return secrets.token_hex(10)


class Engine(StatusDesk):
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
        wait: WaitPolicy | None = None,
        proof_binding: ProofBinding = "solicited",
        answer_limits: AnswerLimits | None = DEFAULT_ANSWER_LIMITS,
        reply_parser: Callable[[bytes], Parsed] | None = None,
        job_source: JobSource | None = None,
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
        # A person's `Re:` reply in a thread we started, read again (SPEC.md "Replies in
        # our thread"); by default the mailbox's own parse options with that reading on.
        self.reply_parser = reply_parser or _reply_parser(parser)
        self.proof_window = proof_window
        self.invoice_skew = invoice_skew
        self.wait = wait  # None: a pending/unavailable proof is refused at once
        self.proof_binding: ProofBinding = proof_binding
        # Automatic answers per peer and per thread (None: no limit; RFC 3834 still holds).
        self.answer_limits = answer_limits
        # What a WAIT says about a flow's job (the status extension, engine/status.py), and
        # the extensions spoken: read from the parser now, before anyone wraps it.
        self.job_source = job_source or store_jobs(store)
        self.extensions = parser_options(parser).extensions

    # ------------------------------------------------------------------ inbound
    async def handle(self, raw: bytes, *, dkim: DkimResult | None = None) -> Outcome:
        dsn = bounce_of(raw)
        if dsn is not None:  # a bounce: recorded on its outbox row, never answered
            return bounce_outcome(self.store, dsn, self.address, self.clock())
        parsed = self.parser(raw)
        fallback = f"<sha256.{hashlib.sha256(raw).hexdigest()[:40]}@unidentified>"
        return await self.handle_parsed(parsed, dkim=dkim, fallback_message_id=fallback, raw=raw)

    async def handle_parsed(
        self,
        parsed: Parsed,
        *,
        dkim: DkimResult | None = None,
        fallback_message_id: str | None = None,
        raw: bytes | None = None,
    ) -> Outcome:
        """`raw`, when given, lets a proof that is not final yet wait in the ledger."""
        parsed = clean_parsed(parsed, fallback_message_id)
        try:
            outcome = await self._handle_parsed(parsed, dkim, fallback_message_id, raw)
        except Exception as exc:
            message_id = parsed.message_id or fallback_message_id
            sender = parsed.from_addr.lower() if parsed.from_addr else None
            if message_id is None:
                raise
            _log.exception("handling %s raised; quarantined", message_id)
            proof = self._proof_key(parsed.message)[0] if parsed.valid and parsed.message else None
            reason = f"handling raised {type(exc).__name__}: {exc}"
            return self._quarantine(parsed, message_id, sender, reason, proof)
        applied = lenient_warnings(parsed.warnings)  # counted per mailbox (profile = "lenient")
        return replace(outcome, lenient=applied) if applied and not outcome.lenient else outcome

    async def _handle_parsed(
        self, parsed: Parsed, dkim: DkimResult | None, fallback_message_id: str | None,
        raw: bytes | None,
    ) -> Outcome:
        message_id = parsed.message_id or fallback_message_id
        sender = parsed.from_addr.lower() if parsed.from_addr else None
        if message_id is None:
            return Outcome("ignored", message_id, detail="not protocol mail")  # nothing to key a record on
        if not parsed.protocol:
            reread = self._our_reply(parsed, sender, raw)
            if reread is None or not reread.protocol:
                return self._not_protocol(parsed, message_id, sender, reread is not None)
            parsed = clean_parsed(reread, fallback_message_id)
        if sender is None:
            # Protocol mail with no one sender (two From fields, several mailboxes, none,
            # unreadable): never answered, but recorded with its reason, as poison is.
            why = parsed.from_problem or "From is no address a reply could be composed to"
            return self._quarantine(parsed, message_id, None, f"ambiguous sender: {why}", None)
        message = parsed.message if parsed.valid else None

        early: tuple[OopsCode, str] | None = None
        poison = unstorable_body(message, parsed.id) if message is not None else None
        if poison is not None:
            message, early = None, (OopsCode.INVALID_FIELD, poison)  # answered, nothing reserved
        elif message is None:
            if parsed.oops is not None:
                early = (parsed.oops, "; ".join(p.detail for p in parsed.problems)[:500])
        else:
            decision = apply_policy(
                acted_on(dkim or DkimResult("none"), sender),
                self.dkim_policy,
                proof_carrying=is_proof_carrying(message),
            )
            if decision.action == "defer":
                return Outcome("deferred", message_id, detail=decision.reason)
            if decision.action == "reject":
                early = (OopsCode.DKIM_FAILED, decision.reason)

        _dkim_label.set(dkim_label(dkim, sender))
        if early is None and self.is_status(message, sender):
            return await self._status(parsed, message_id, sender)  # the status extension (engine/status.py)
        proof_key: ProofKey | None = None
        if message is not None and early is None:
            proof_key, problem = self._proof_key(message)
            if problem is not None:
                early = problem

        for _ in range(MAX_CONFLICT_RETRIES):
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
                refs=typed_refs(message) if claimable and message is not None else (),
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
            elif begin.status in _BEGIN_REFUSALS:
                problem, owns_replay = _BEGIN_REFUSALS[begin.status]
                result = await self._refuse_early(parsed, message_id, sender, problem, owns_replay, now)
            else:
                result = await self._step(parsed, message, message_id, sender, begin, proof_key, now, raw)
            if result is not None:
                return result
        raise RuntimeError(f"flow kept changing under {message_id}; gave up after retries")

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
        raw: bytes | None = None,
    ) -> Outcome | None:
        record, conflict = self._resolve(message, sender, begin, parsed)
        work: Work | None = None
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
                    work = Work(fs, record.flow_id, record.version, sender)
            if work is None and opened is not None and begin.missing_refs and is_proof_carrying(message):
                # Spec: a typed ref that names none of our messages is unknown_ref; its
                # proof is not judged (so not spent), nor is the PAY taken as unsolicited.
                refusal = (OopsCode.UNKNOWN_REF, f"no message of ours has id {begin.missing_refs[0][:80]!r}")
            elif work is None:
                if opened is None:
                    unknown = begin.missing_refs or parsed.in_reply_to
                    missing = OopsCode.UNKNOWN_REF if unknown else OopsCode.UNEXPECTED_MESSAGE
                    refusal = (missing, "this message joins no flow of ours")
                else:
                    work = Work(opened, self.new_id("flow"), 0, sender)
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
            # A message that does not fit: its code (or silence), the state as it was. It is
            # logged in an existing flow; a flow it would have opened is not created.
            extra = await self._unusable(message, work, step.oops, proof_key, now)
            return self._commit_refused(
                parsed, message_id, sender, work, in_entry, now,
                state=work.fs.state, oops=step.oops, detail=step.detail,
                answer=not isinstance(message, Oops),
                proof=proof_key,  # never judged: not spent, unless its money went back
                proof_fate=(work.proof_fate or "release") if proof_key is not None else None,
                extra=extra,
            )

        await self._run_actions(parsed, message, step, work, proof_key, now)
        parked = park(self.store, self.wait, local=self.address, worker=self.worker_id, message_id=message_id,
                      raw=raw, step=step, work=work, existed=work.version > 0, now=now)
        if parked is not None:
            return parked
        return await self._commit_work(
            parsed, message, message_id, sender, work, step, proof_key, in_entry, now
        )

    def _ctx(self, work: Work, now: datetime) -> Context:
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

    async def _verify(
        self, message: Message, step: Step, work: Work, proof_key: ProofKey | None
    ) -> tuple[OopsCode, str] | None:
        return await verify_proof(
            message,
            step,
            work,
            rails=self.rails,
            wallet=self.app.wallet,
            clock=self.clock,
            proof_window=self.proof_window,
            invoice_skew=self.invoice_skew,
            local=self.address,
            proof_key=proof_key.key if proof_key is not None else None,
            binding=self.proof_binding,
        )

    async def _unusable(
        self, message: Message, work: Work, code: OopsCode | None, proof_key: ProofKey | None, now: datetime
    ) -> Mapping[str, Any] | None:
        """A PAY refused for its amount: its money back, when it reached us (engine/unusable.py)."""
        if code is not OopsCode.AMOUNT_MISMATCH:
            return None
        return await refund_unusable(
            message, work, self.app, rails=self.rails, wallet=self.app.wallet, local=self.address,
            proof_key=proof_key.key if proof_key is not None else None, now=now,
            proof_window=self.proof_window, invoice_skew=self.invoice_skew,
        )

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
        work: Work,
        proof_key: ProofKey | None,
        now: datetime,
    ) -> None:
        before = work.fs
        work.fs = FlowState(before.kind, before.side, step.state, step.data)
        if not isinstance(message, Oops):
            # Our later sends in this flow reply to its latest substantive message.
            data = dict(step.data)
            data["last_in"] = {"message_id": parsed.message_id, "references": list(reply_headers(parsed)[1])}
            work.fs = replace(work.fs, data=data)
        work.start = before
        for action in step.actions:
            decision: Any = None
            if action is Action.VERIFY_PROOF:
                failed = await self._verify(message, step, work, proof_key)
                if failed is not None:
                    work.oops, work.detail = failed
                    work.persist = False  # the message did not happen, as far as the flow goes
                    work.oops_extra = await self._unusable(message, work, work.oops, proof_key, now)
                    return
                await refund_excess(message, work, self.app, local=self.address,
                                    proof_key=proof_key.key if proof_key is not None else None)
                continue
            if action is Action.VERIFY_REFUND:
                await check_refund(message, work, rails=self.rails, wallet=self.app.wallet)
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
                order = order_of(work.fs.data)
                if order is None:
                    decision = Refuse(OopsCode.TASK_FAILED, "no ORDER recorded in this flow")
                else:
                    decision = await self._ask(partial(self.app.fulfill, order, message, ctx))
            elif action is Action.DECIDE_OFFER:
                assert isinstance(message, Offer)
                decision = await self._ask(partial(self.app.offer, message, ctx))
            if isinstance(decision, Enqueue):  # no answer now: the job runner's, later
                work.job = job_of(decision, message, work, parsed.message_id, self.address, now)
                work.notices.append(Notice(work.flow_id, work.fs.kind, work.fs.side, work.fs.state, work.peer,
                                           message, parsed.message_id, work.verdict, work.job.job_id))
                self.tell_accepted(parsed, message, work, now)  # WAIT queued, to a buyer that asked for it
                continue
            self._apply_decision(parsed, decision, work, now)

    def _apply_decision(self, parsed: Parsed, decision: Any, work: Work, now: datetime) -> None:
        if decision is None:
            return  # silence is always valid
        if isinstance(decision, OopsCode):
            decision = Refuse(decision)
        if isinstance(decision, Refuse):
            oops = self._oops(decision.code, decision.note, parsed.id, decision.extra)
            work.replies.append(self._reply(parsed, work.peer, oops, now))
            work.oops, work.detail = decision.code, decision.note
            return
        decision = self.bind_proof(decision, work.peer)  # an ACCEPT's counter-payment
        if isinstance(decision, Invoice | Methods) and decision.binding is None:
            # Tell the payer what binding its proof must carry (SPEC.md "Proof binding").
            decision = decision.model_copy(update={"binding": BINDING_SCHEME})
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
        data = stamp_invoice(decision, out_step.data, now)
        work.fs = FlowState(work.fs.kind, work.fs.side, out_step.state, data)
        work.replies.append(self._reply(parsed, work.peer, decision, now))

    async def _commit_work(
        self,
        parsed: Parsed,
        message: Message,
        message_id: str,
        sender: str,
        work: Work,
        step: Step,
        proof_key: ProofKey | None,
        in_entry: LogEntry,
        now: datetime,
    ) -> Outcome | None:
        verdict_json = work.verdict.to_json() if work.verdict is not None else None
        if not work.persist:
            # Verification failed: OOPS, no state change; the proof's fate is recorded.
            assert work.oops is not None
            as_read = work.start if work.start is not None else work.fs  # nothing was written
            return self._commit_refused(
                parsed, message_id, sender, work, in_entry, now,
                state=as_read.state, oops=work.oops, detail=work.detail, answer=True,
                proof=proof_key, proof_fate=work.proof_fate, replay_fate=work.replay_fate,
                verdict=verdict_json, extra=work.oops_extra,
            )

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
        log += [out_entry(work.flow_id, r, now) for r in work.replies]
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
            job_new=work.job,
        )
        result = self._finish(commit, outcome, message_id, parsed)
        if result is not None and result.repeat is None:
            for notice in work.notices:
                notice = replace(notice, state=work.fs.state)
                try:
                    await self.app.notify(notice)
                except Exception:
                    _log.exception("application notify raised")
        return result
