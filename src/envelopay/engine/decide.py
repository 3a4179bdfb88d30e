"""The inbound path's decisions, as pure functions that return plans (the move h11 makes).

Nothing here reads the ledger, asks a rail or the application, or looks at a clock: each
function takes what was read (the `InboundMail`, the ledger's `Begin`, the step's `Work`)
and says what to do. The driver (engine/inbound.py, engine/actions.py) does the I/O:

    admit(mail, policy, rails)      → Admission: defer, refuse early (with what), the
                                      status extension's, or go (with the proof key)
    claim_of(settings, mail, adm…)  → the ledger Claim begin_step takes
    plan(settings, mail, adm…, begin, now)
                                    → Plan: the outcome already recorded (Recorded), a
                                      refusal before any flow (RefuseEarly), a message its
                                      flow's table refuses (Misfit), or the step to take
                                      (StepFlow: its Work, flows.step's Step, its log line)
    settle(settings, mail, work…)   → the one Commit (and its Outcome), or a FlowRefusal

The plan of the step itself — which proof to verify, which application question to
ask, what to send — is the flow table's (`flows.step(...).actions`), read by the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any, Literal

from envelopay import flows
from envelopay.dkim import DkimResult, apply_policy
from envelopay.engine.alignment import acted_on
from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome
from envelopay.engine.poison import unstorable_body
from envelopay.engine.refusals import FlowRefusal
from envelopay.engine.settings import DkimPolicy, EngineSettings
from envelopay.engine.step_facts import Work, content_hash, out_entry, proof_of, typed_refs
from envelopay.flows import Direction, FlowKind, FlowState, Side, Step
from envelopay.flows.core import excess_of, refund_of
from envelopay.ledger.store import Begin, Claim, Commit, FlowRecord, FlowWrite, LogEntry, ProofKey
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, Oops, is_proof_carrying
from envelopay.rails.interface import Rail

__all__ = [
    "BEGIN_REFUSALS",
    "Admission",
    "Joined",
    "Misfit",
    "Plan",
    "Recorded",
    "RefuseEarly",
    "StepFlow",
    "admit",
    "claim_of",
    "in_entry_of",
    "join",
    "misfit",
    "plan",
    "proof_key_of",
    "settle",
]

Problem = tuple[OopsCode, str]

# begin_step statuses refused at once: ((code, detail), whether this message owns its
# (sender, id) reservation; a reused id belongs to the message that used it first).
BEGIN_REFUSALS: dict[str, tuple[Problem, bool]] = {
    "duplicate_id": ((OopsCode.DUPLICATE_ID, "id reused with other content"), False),
    "proof_replayed": ((OopsCode.PROOF_REPLAYED, "this proof was already presented"), True),
}


@dataclass(frozen=True, slots=True)
class Admission:
    """What the gate decided: `deferred` (a DKIM key lookup to retry: its reason), else
    the message to step (None when it cannot be), the problem to refuse it with before
    any flow, and the replay key of the proof it carries."""

    message: Message | None
    early: Problem | None = None
    proof_key: ProofKey | None = None
    deferred: str | None = None

    @property
    def claimable(self) -> bool:
        """It reserves its (sender, id) and its proof: it will be stepped."""
        return self.message is not None and self.early is None


def proof_key_of(message: Message, rails: dict[str, Rail]) -> tuple[ProofKey | None, Problem | None]:
    """The proof's replay key (chain and canonical key), or why it has none. An OOPS's
    refund proof is reserved too, so one transfer is the refund of one payment only."""
    refund = refund_of(message) or excess_of(message)  # a FULFILL's excess paid back, too
    if refund is not None:  # no rail or a bad proof: nothing to reserve, the OOPS is read plain
        chain, rail = str(refund["chain"]), rails.get(str(refund["chain"]))
        try:
            return (ProofKey(chain, rail.proof_key(dict(refund["proof"]))) if rail else None), None
        except ValueError:
            return None, None
    if not is_proof_carrying(message):
        return None, None
    chain, proof = proof_of(message)
    rail = rails.get(chain)
    if rail is None:
        return None, (OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {chain!r} here")
    try:
        return ProofKey(chain, rail.proof_key(proof)), None
    except ValueError as exc:
        return None, (OopsCode.INVALID_FIELD, f"proof: {exc}")


def admit(mail: InboundMail, policy: DkimPolicy, rails: dict[str, Rail]) -> Admission:
    """Poison, parse problems and the DKIM policy (aligned against the From acted on)."""
    parsed, message, sender = mail.parsed, mail.message, mail.sender
    if message is not None:
        poison = unstorable_body(message, parsed.id)
        if poison is not None:
            return Admission(None, (OopsCode.INVALID_FIELD, poison))  # answered, nothing reserved
    if message is None:
        if parsed.oops is None:
            return Admission(None)
        return Admission(None, (parsed.oops, "; ".join(p.detail for p in parsed.problems)[:500]))
    decision = apply_policy(
        acted_on(mail.dkim or DkimResult("none"), sender), policy, proof_carrying=is_proof_carrying(message)
    )
    if decision.action == "defer":
        return Admission(message, deferred=decision.reason)
    if decision.action == "reject":
        return Admission(message, (OopsCode.DKIM_FAILED, decision.reason))
    proof_key, problem = proof_key_of(message, rails)
    return Admission(message, problem, proof_key)


def claim_of(settings: EngineSettings, mail: InboundMail, admission: Admission, now: datetime) -> Claim:
    """The claim on the Message-ID, and, for a message to step, the reservations of its
    (sender, id) and its proof, and the refs and thread to find its flow by."""
    assert mail.message_id is not None
    message = admission.message if admission.claimable else None
    return Claim(
        local=settings.address,
        message_id=mail.message_id,
        content_hash=content_hash(mail.parsed),
        worker=settings.worker_id,
        now=now,
        lease_until=now + settings.lease,
        sender=mail.sender if message is not None else None,
        protocol_id=mail.protocol_id if message is not None else None,
        proof=admission.proof_key if message is not None else None,
        refs=typed_refs(message) if message is not None else (),
        thread=mail.thread if message is not None else (),
    )


@dataclass(frozen=True, slots=True)
class Joined:
    """The flow a message steps (`work`), or the refusal: `problem` None with no work is
    silence (an OOPS that joins nothing is never answered)."""

    work: Work | None
    problem: Problem | None = None


def _resolve(mail: InboundMail, begin: Begin) -> tuple[FlowRecord | None, Problem | None]:
    sender = mail.sender
    ref_flows = {f.flow_id: f for f in begin.ref_flows if f.peer == sender}
    if len(ref_flows) > 1:
        return None, (OopsCode.THREAD_CONFLICT, "typed refs name different flows")
    by_ref = next(iter(ref_flows.values()), None)
    by_thread = next((f for _mid, f in begin.thread_flows if f.peer == sender), None)
    reply_flow = next((f for mid, f in begin.thread_flows if mid == mail.parsed.in_reply_to), None)
    if (
        by_ref is not None
        and reply_flow is not None
        and reply_flow.peer == sender
        and reply_flow.flow_id != by_ref.flow_id
    ):
        return None, (OopsCode.THREAD_CONFLICT, "refs and In-Reply-To name different flows")
    return by_ref or by_thread, None


def join(mail: InboundMail, message: Message, begin: Begin, new_flow_id: Callable[[], str]) -> Joined:
    """The flow `message` steps: the one its typed refs (then its thread) name, or the one
    it opens; a repeat customer opening a new flow in an old thread gets a new one."""
    assert mail.sender is not None
    record, conflict = _resolve(mail, begin)
    if conflict is not None:
        return _refused(message, conflict)
    opened = flows.opening(message, Direction.IN)
    if record is not None:
        fs = FlowState(FlowKind(record.kind), Side(record.side), record.state, record.data)
        if begin.ref_flows or opened is None or flows.accepts(fs, message, Direction.IN):
            timings = mail.verify_seconds
            return Joined(Work(fs, record.flow_id, record.version, mail.sender, verify_seconds=timings))
    if opened is not None and begin.missing_refs and is_proof_carrying(message):
        # Spec: a typed ref that names none of our messages is unknown_ref; its
        # proof is not judged (so not spent), nor is the PAY taken as unsolicited.
        return _refused(
            message, (OopsCode.UNKNOWN_REF, f"no message of ours has id {begin.missing_refs[0][:80]!r}")
        )
    if opened is None:
        unknown = begin.missing_refs or mail.parsed.in_reply_to
        missing = OopsCode.UNKNOWN_REF if unknown else OopsCode.UNEXPECTED_MESSAGE
        return _refused(message, (missing, "this message joins no flow of ours"))
    return Joined(Work(opened, new_flow_id(), 0, mail.sender, verify_seconds=mail.verify_seconds))


def _refused(message: Message, problem: Problem) -> Joined:
    return Joined(None, None if isinstance(message, Oops) else problem)


@dataclass(frozen=True, slots=True)
class Recorded:
    """The ledger already holds this message's outcome, or another worker its claim."""

    outcome: Outcome


@dataclass(frozen=True, slots=True)
class RefuseEarly:
    """Refuse before any flow is touched: `problem` (None: silence), whether the message
    owns its (sender, id), and a proof it reserved, to release unjudged."""

    problem: Problem | None
    owns_replay: bool
    release: ProofKey | None = None


@dataclass(frozen=True, slots=True)
class Misfit:
    """The flow's table refuses the message (`step.ok` is False): its code or silence."""

    work: Work
    step: Step
    in_entry: LogEntry


@dataclass(frozen=True, slots=True)
class StepFlow:
    """The step to take: the flow's `work`, the table's `step` (its actions are what the
    driver does next) and the log line of the message received."""

    work: Work
    step: Step
    in_entry: LogEntry


Plan = Recorded | RefuseEarly | Misfit | StepFlow


def plan(
    settings: EngineSettings, mail: InboundMail, admission: Admission, begin: Begin, now: datetime
) -> Plan:
    """What to do with the ledger's answer to the claim (`begin`)."""
    assert mail.message_id is not None
    if begin.status == "seen":
        assert begin.outcome is not None
        return Recorded(Outcome.from_json(begin.outcome, repeat="message_id"))
    if begin.status == "busy":
        return Recorded(Outcome("busy", mail.message_id, detail="claimed by another worker"))
    if begin.status == "retransmission":
        assert begin.outcome is not None
        repeated = Outcome.from_json(begin.outcome, repeat="retransmission")
        return Recorded(replace(repeated, message_id=mail.message_id, outbox=begin.requeued))
    message = admission.message
    if not admission.claimable or message is None:
        return RefuseEarly(admission.early, admission.claimable)
    if begin.status in BEGIN_REFUSALS:
        problem, owns_replay = BEGIN_REFUSALS[begin.status]
        return RefuseEarly(problem, owns_replay)
    joined = join(mail, message, begin, partial(settings.new_id, "flow"))
    if joined.work is None:
        return RefuseEarly(joined.problem, True, admission.proof_key)
    work = joined.work
    step = flows.step(work.fs, message, Direction.IN)
    in_entry = in_entry_of(mail, message, work, settings.address, now)
    return StepFlow(work, step, in_entry) if step.ok else Misfit(work, step, in_entry)


def in_entry_of(mail: InboundMail, message: Message, work: Work, local: str, now: datetime) -> LogEntry:
    """The flow log's line for the message received."""
    assert mail.message_id is not None and mail.sender is not None
    return LogEntry(
        work.flow_id,
        now,
        "in",
        message.type,
        mail.message_id,
        mail.protocol_id,
        mail.sender,
        local,
        message.model_dump(mode="json"),
    )


def misfit(work: Work, step: Step, proof_key: ProofKey | None, answer: bool) -> FlowRefusal:
    """A message the flow's table does not accept: its code (or silence), the state as it
    was; its proof never judged (so not spent, unless its money went back)."""
    fate: Literal["spend", "release"] | None = (
        (work.proof_fate or "release") if proof_key is not None else None
    )
    return FlowRefusal(
        state=work.fs.state,
        oops=step.oops,
        detail=step.detail,
        answer=answer,
        proof=proof_key,
        proof_fate=fate,
        extra=work.oops_extra,
    )


def settle(
    settings: EngineSettings,
    mail: InboundMail,
    work: Work,
    proof_key: ProofKey | None,
    in_entry: LogEntry,
    now: datetime,
) -> tuple[Commit, Outcome] | FlowRefusal:
    """The step's one commit: state, log, refs, outbox rows, the proof's and the (sender,
    id)'s fates and the job taken on; or, when the proof failed, the refusal to record."""
    assert mail.message_id is not None and mail.sender is not None
    verdict_json = work.verdict.to_json() if work.verdict is not None else None
    if not work.persist:  # verification failed: OOPS, no state change; the proof's fate recorded
        return _proof_failed(work, proof_key, verdict_json)
    sender, fid = mail.sender, work.flow_id
    unchanged = work.version > 0 and work.fs == work.start
    record = FlowRecord(
        flow_id=fid,
        local=settings.address,
        peer=sender,
        kind=work.fs.kind.value,
        side=work.fs.side.value,
        state=work.fs.state,
        version=work.version,
        data=work.fs.data,
        created_at=now,
        updated_at=now,
    )
    outcome = Outcome(
        "processed",
        mail.message_id,
        flow_id=fid,
        state=work.fs.state,
        oops=work.oops,
        detail=work.detail,
        outbox=tuple(r.message_id for r in work.replies),
        verdict=verdict_json,
    )
    log = [replace(in_entry, verdict=verdict_json), *(out_entry(fid, r, now) for r in work.replies)]
    commit = Commit(
        local=settings.address,
        now=now,
        outcome=outcome.to_json(),
        message_id=mail.message_id,
        worker=settings.worker_id,
        flow=None if unchanged else FlowWrite(record),  # e.g. an OOPS: logged only
        log=tuple(log),
        refs=_refs(mail, work, settings.address),
        message_ids=((mail.message_id, fid), *((r.message_id, fid) for r in work.replies)),
        outbox=tuple((r, fid) for r in work.replies),
        proof=proof_key,
        proof_fate=work.proof_fate if proof_key is not None else None,
        proof_verdict=verdict_json,
        sender=sender,
        protocol_id=mail.protocol_id,
        replay_fate="done",
        job_new=work.job,
    )
    return commit, outcome


def _proof_failed(work: Work, proof_key: ProofKey | None, verdict: Mapping[str, Any] | None) -> FlowRefusal:
    """A proof that did not pay: the OOPS, the flow as it was read (nothing was written)."""
    assert work.oops is not None
    as_read = work.start if work.start is not None else work.fs
    return FlowRefusal(
        state=as_read.state,
        oops=work.oops,
        detail=work.detail,
        answer=True,
        proof=proof_key,
        proof_fate=work.proof_fate,
        replay_fate=work.replay_fate,
        verdict=verdict,
        extra=work.oops_extra,
    )


def _refs(mail: InboundMail, work: Work, local: str) -> tuple[tuple[str, str, str, str], ...]:
    """The protocol ids the commit files under the flow: (peer, author, id, flow): the
    sender's message's id and the ids of our replies."""
    assert mail.sender is not None
    sender, fid = mail.sender, work.flow_id
    refs: list[tuple[str, str, str, str]] = []
    if mail.protocol_id is not None:
        refs.append((sender, sender, mail.protocol_id, fid))
    for r in work.replies:
        rid = getattr(r.message, "id", None)
        if isinstance(rid, str):
            refs.append((sender, local, rid, fid))
    return tuple(refs)
