"""The engine: the inbound path of DESIGN.md, up to the outbox commit, as a thin driver.

    raw → parse → InboundMail (engine/inbound_mail.py, built once) → admit: DKIM policy,
    poison, proof key (engine/decide.py, pure) → ledger.begin_step (claim Message-ID,
    reserve (sender, id) and the proof key, find the flow) → join (pure) → flows.step →
    actions (engine/actions.py: rail.verify, the application's decisions) → settle (pure:
    the one Commit) → ledger.commit_step (state + log + outbox, one transaction) → Outcome

No write transaction is open while a rail verifies or the application decides. A
crash between the two transactions leaves the claim and the reservations owned by the
message, so the same message redoes the step when it comes back. Remote mistakes
become OOPS codes here and only here; an OOPS is never answered with an OOPS, and
mail that does not speak the protocol is recorded with its reason, answered only by the
help note a mailbox may ask for ([answers] help); a person's `Re:` reply in a thread we
started is read by its JSON (engine/not_protocol.py, SPEC.md "Replies in our thread").

`Engine` is composed, not inherited: it holds its settings (engine/settings.py) and its
parts — the recorder, the refusals, the status desk, the sender, the action driver —
each a collaborator built around the same settings.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Generic, TypeVar, overload

from envelopay.dkim import DkimResult
from envelopay.engine import decide
from envelopay.engine.actions import ActionDriver
from envelopay.engine.application import Application
from envelopay.engine.bounces import bounce_of, bounce_outcome
from envelopay.engine.inbound_mail import InboundMail, fallback_id
from envelopay.engine.not_protocol import NotProtocol
from envelopay.engine.outcome import Outcome, Sent
from envelopay.engine.recorder import Recorder
from envelopay.engine.refusals import FlowRefusal, Refusals
from envelopay.engine.send import Addressing, Sender
from envelopay.engine.settings import DkimPolicy, EngineSettings, ProofBinding
from envelopay.engine.status import JobSource, StatusDesk, store_jobs
from envelopay.engine.step_facts import INVOICE_SKEW, MAX_CONFLICT_RETRIES, Work
from envelopay.engine.waiting import park
from envelopay.ledger.jobs import JobMove
from envelopay.ledger.store import AnswerLimits, ProofKey, Store
from envelopay.protocol.lenient import lenient_warnings
from envelopay.protocol.messages import Fulfill, Message, Oops
from envelopay.protocol.parse import ParseOptions, parse, parser_options
from envelopay.protocol.parsed import Parsed
from envelopay.rails.finality import WaitPolicy
from envelopay.rails.interface import Rail

__all__ = ["DkimPolicy", "Engine"]

_log = logging.getLogger(__name__)

DEFAULT_ANSWER_LIMITS = AnswerLimits()
T = TypeVar("T")


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


class _Setting(Generic[T]):
    """An engine attribute that reads and writes its settings, which every part holds."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _Setting[T]: ...
    @overload
    def __get__(self, obj: Engine, objtype: type | None = None) -> T: ...
    def __get__(self, obj: Engine | None, objtype: type | None = None) -> T | _Setting[T]:
        if obj is None:
            return self
        value: T = getattr(obj.settings, self.name)
        return value

    def __set__(self, obj: Engine, value: T) -> None:
        setattr(obj.settings, self.name, value)


class Engine:
    """One mailbox's engine. `rails` maps a chain name to the rail that serves it."""

    store: _Setting[Store] = _Setting()
    address: _Setting[str] = _Setting()
    domain: _Setting[str] = _Setting()
    rails: _Setting[dict[str, Rail]] = _Setting()
    app: _Setting[Application] = _Setting()
    dkim_policy: _Setting[DkimPolicy] = _Setting()
    clock: _Setting[Callable[[], datetime]] = _Setting()
    worker_id: _Setting[str] = _Setting()
    parser: _Setting[Callable[[bytes], Parsed]] = _Setting()
    proof_binding: _Setting[ProofBinding] = _Setting()
    wait: _Setting[WaitPolicy | None] = _Setting()
    extensions: _Setting[frozenset[str]] = _Setting()

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
        self.settings = EngineSettings(
            store=store,
            address=address.lower(),
            domain=domain,
            rails=dict(rails),
            app=app,
            dkim_policy=dkim_policy,
            clock=clock,
            id_factory=id_factory,
            worker_id=worker_id or f"w-{secrets.token_hex(6)}",
            lease=lease,
            parser=parser,
            reply_parser=reply_parser or _reply_parser(parser),
            proof_window=proof_window,
            invoice_skew=invoice_skew,
            wait=wait,
            proof_binding=proof_binding,
            answer_limits=answer_limits,
            # Read from the parser now, before anyone replaces it (Engine.parser = …).
            extensions=parser_options(parser).extensions,
        )
        self.recorder = Recorder(self.settings)
        self.refusals = Refusals(self.recorder)
        self.not_protocol = NotProtocol(self.recorder)
        # What a WAIT says about a flow's job (the status extension, engine/status.py).
        self.status = StatusDesk(self.recorder, self.refusals, job_source or store_jobs(store))
        self.sender = Sender(self.settings, self.status.advertise)
        self.actions = ActionDriver(self.recorder, self.status, self.sender.bind_proof)

    # ------------------------------------------------------------------ the parts' faces
    def new_id(self, prefix: str) -> str:
        return self.settings.new_id(prefix)

    def new_message_id(self) -> str:
        return self.settings.new_message_id()

    @property
    def speaks_status(self) -> bool:
        return self.status.speaks_status

    def bind_proof(self, message: Message, to: str) -> Message:
        return self.sender.bind_proof(message, to)

    async def send(
        self,
        message: Message,
        to: str,
        *,
        flow_id: str | None = None,
        in_reply_to: str | None = None,
        references: tuple[str, ...] = (),
        note: str | None = None,
        job: JobMove | None = None,
    ) -> Sent:
        """Record an outgoing message in its flow and write its outbox row (engine/send.py)."""
        return await self.sender.send(message, Addressing(to, flow_id, in_reply_to, references, note), job)

    def send_whatsup(self, flow_id: str, note: str | None = None) -> Sent:
        return self.status.send_whatsup(flow_id, note)

    # ------------------------------------------------------------------ inbound
    async def handle(self, raw: bytes, *, dkim: DkimResult | None = None) -> Outcome:
        return (await self.handle_read(raw, dkim=dkim))[1]

    async def handle_read(
        self, raw: bytes, *, dkim: DkimResult | None = None
    ) -> tuple[Parsed | None, Outcome]:
        """`handle`, with the parse of `raw` it acted on (None: a bounce, which is not
        parsed): the type and sender worker serve's log names (node/observe.py)."""
        dsn = bounce_of(raw)
        if dsn is not None:  # a bounce: recorded on its outbox row, never answered
            return None, bounce_outcome(self.store, dsn, self.address, self.clock())
        parsed = self.parser(raw)
        outcome = await self.handle_parsed(parsed, dkim=dkim, fallback_message_id=fallback_id(raw), raw=raw)
        return parsed, outcome

    async def handle_parsed(
        self,
        parsed: Parsed,
        *,
        dkim: DkimResult | None = None,
        fallback_message_id: str | None = None,
        raw: bytes | None = None,
    ) -> Outcome:
        """`raw`, when given, lets a proof that is not final yet wait in the ledger."""
        mail = InboundMail.of(parsed, dkim=dkim, fallback_message_id=fallback_message_id, raw=raw)
        try:
            outcome = await self._handle(mail)
        except Exception as exc:
            if mail.message_id is None:
                raise
            _log.exception("handling %s raised; quarantined", mail.message_id)
            message = mail.message
            proof = decide.proof_key_of(message, self.rails)[0] if message is not None else None
            outcome = self.recorder.quarantine(mail, f"handling raised {type(exc).__name__}: {exc}", proof)
            return self._timed(outcome, mail)
        applied = lenient_warnings(mail.parsed.warnings)  # counted per mailbox (profile = "lenient")
        outcome = replace(outcome, lenient=applied) if applied and not outcome.lenient else outcome
        return self._timed(outcome, mail)

    @staticmethod
    def _timed(outcome: Outcome, mail: InboundMail) -> Outcome:
        """`outcome` with the rail verifications handling `mail` made; a copy only when
        a rail was asked (that call, not this, is what such a message costs)."""
        timings = mail.verify_seconds
        return replace(outcome, verify_seconds=tuple(timings)) if timings else outcome

    async def _handle(self, mail: InboundMail) -> Outcome:
        if mail.message_id is None:
            return Outcome("ignored", None, detail="not protocol mail")  # nothing to key a record on
        if not mail.parsed.protocol:
            reread = self.not_protocol.our_reply(mail)
            if reread is None or not reread.protocol:
                return self.not_protocol.record(mail, reread is not None)
            mail = mail.reread(reread)
        if mail.sender is None:
            # Protocol mail with no one sender (two From fields, several mailboxes, none,
            # unreadable): never answered, but recorded with its reason, as poison is.
            why = mail.parsed.from_problem or "From is no address a reply could be composed to"
            return self.recorder.quarantine(mail, f"ambiguous sender: {why}", None)
        admission = decide.admit(mail, self.dkim_policy, self.rails)
        if admission.deferred is not None:
            return Outcome("deferred", mail.message_id, detail=admission.deferred)
        mail = mail.labelled()
        assert mail.sender is not None
        if admission.early is None and self.status.is_status(admission.message, mail.sender):
            return await self.status.handle(mail)  # the status extension (engine/status.py)
        for _ in range(MAX_CONFLICT_RETRIES):
            result = await self._attempt(mail, admission)
            if result is not None:
                return result
        raise RuntimeError(f"flow kept changing under {mail.message_id}; gave up after retries")

    async def _attempt(self, mail: InboundMail, admission: decide.Admission) -> Outcome | None:
        """One try at the step; None when the flow changed under it (try again)."""
        now = self.clock()
        begin = self.store.begin_step(decide.claim_of(self.settings, mail, admission, now))
        replayed = begin.status == "proof_replayed" and isinstance(admission.message, Oops | Fulfill)
        if replayed:  # its refund's transfer is spent elsewhere: not believed (refund_check.py)
            admission = replace(admission, proof_key=None)
            begin = self.store.begin_step(decide.claim_of(self.settings, mail, admission, now))
        plan = decide.plan(self.settings, mail, admission, begin, now)
        if isinstance(plan, decide.StepFlow | decide.Misfit):
            plan.work.refund_replayed = replayed
        if isinstance(plan, decide.Recorded):
            return plan.outcome
        if isinstance(plan, decide.RefuseEarly):
            return await self.refusals.early(mail, plan.problem, plan.owns_replay, now, plan.release)
        assert admission.message is not None
        message, proof_key, work = admission.message, admission.proof_key, plan.work
        if isinstance(plan, decide.Misfit):
            # A message that does not fit: its code (or silence), the state as it was. It is
            # logged in an existing flow; a flow it would have opened is not created.
            key = proof_key.key if proof_key is not None else None
            await self.actions.unusable(message, work, plan.step.oops, key, now)
            refusal = decide.misfit(work, plan.step, proof_key, answer=not isinstance(message, Oops))
            return self.refusals.in_flow(mail, work, plan.in_entry, now, refusal)
        return await self._step(mail, message, plan, proof_key, now)

    async def _step(
        self,
        mail: InboundMail,
        message: Message,
        plan: decide.StepFlow,
        proof_key: ProofKey | None,
        now: datetime,
    ) -> Outcome | None:
        """The driver of a step that fits: the table's actions, a proof parked to wait, or the
        one commit the plan settles on, then the application's notices."""
        work = plan.work
        await self.actions.run(mail, message, plan.step, work, proof_key, now)
        parked = park(self.settings, mail, plan.step, work, now)
        if parked is not None:
            return parked
        settled = decide.settle(self.settings, mail, work, proof_key, plan.in_entry, now)
        if isinstance(settled, FlowRefusal):
            return self.refusals.in_flow(mail, work, plan.in_entry, now, settled)
        commit, outcome = settled
        result = self.recorder.finish(commit, outcome, mail)
        if result is not None and result.repeat is None:
            await self._tell(work)
        return result

    async def _tell(self, work: Work) -> None:
        """The application hears what this step committed (its notices)."""
        for notice in work.notices:
            try:
                await self.app.notify(replace(notice, state=work.fs.state))
            except Exception:
                _log.exception("application notify raised")
