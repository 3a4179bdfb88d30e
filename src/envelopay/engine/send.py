"""The outbound send: record a message we compose in its flow and write its outbox row.

The client role steps its own messages through the same tables as the inbound path
(direction "out"), so the buyer's flow state is tracked too. `Sender` is the engine's
collaborator that sends (it holds the engine's settings and how the status extension
advertises itself); the drainer (envelopay.engine.outbox) delivers the row afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from envelopay import flows
from envelopay.engine.outcome import Sent
from envelopay.engine.poison import unstorable_body
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import MAX_CONFLICT_RETRIES, REF_FIELDS, out_entry, stamp_invoice, typed_refs
from envelopay.errors import UsageError
from envelopay.flows import Direction, FlowKind, FlowState, Side, Step
from envelopay.ledger.jobs import JobMove
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite
from envelopay.protocol.messages import Message, Offer
from envelopay.protocol.outbound import Outbound
from envelopay.rails.binding import BindingRail, bind_message

__all__ = ["Addressing", "Placed", "Sender"]


@dataclass(frozen=True, slots=True)
class Addressing:
    """Where a message we send goes: to whom (`to`, lowercased), its flow (`flow_id`, else
    found by its refs or `in_reply_to`), its threading headers and the sender's note."""

    to: str
    flow_id: str | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Placed:
    """The flow a message we send steps (its record, None for a new flow) and the step."""

    record: FlowRecord | None
    fs: FlowState
    step: Step


class Sender:
    def __init__(self, settings: EngineSettings, advertise: Callable[[Message], Message]) -> None:
        self.settings = settings
        self.advertise = advertise  # the extensions we speak, named in an ORDER we send

    async def send(self, message: Message, where: Addressing, job: JobMove | None = None) -> Sent:
        """Record an outgoing message in its flow and write its outbox row.

        The flow is `where.flow_id`, else the one the message's typed refs name, else the
        one `in_reply_to` names, else the flow the message opens. A message the flow's table
        refuses raises UsageError (nothing is written). Threading headers default to a
        reply to the flow's latest inbound message. `job`: a job's move written in the same
        commit (its answer goes out once); a job no longer in its from_states raises
        UsageError, nothing written."""
        where = replace(where, to=where.to.lower())
        # What no mail or ledger row can hold (a lone surrogate, NUL, too deep to serialize)
        # is refused before the first write: it used to be committed with its flow and
        # outbox row, then fail at compose in the drainer (issue 29, item 12).
        problem = unstorable_body(message, getattr(message, "id", None))
        if problem is not None:
            raise UsageError(f"{message.type.upper()}: {problem}; nothing was written")
        message = self.advertise(self.bind_proof(message, where.to))
        for _ in range(MAX_CONFLICT_RETRIES):
            now = self.settings.clock()
            placed = self._place(message, where)
            commit, ob = self._commit_of(message, where, placed, now)
            if job is not None:  # the job's answer is this message: recorded with it
                commit = replace(
                    commit, job_move=replace(job, fields={**job.fields, "answer_id": ob.message_id})
                )
            result = self.settings.store.commit_step(commit)
            if result == "ok":
                assert commit.flow is not None
                return Sent(commit.flow.record.flow_id, placed.step.state, ob.message_id, ob)
            if result == "lost" and job is not None:
                raise UsageError(f"job {job.job_id} moved on: nothing sent")
        raise RuntimeError("flow kept changing while sending; gave up after retries")

    def _place(self, message: Message, where: Addressing) -> Placed:
        """The flow `message` steps and the step, or UsageError (nothing written)."""
        record = self._outbound_flow(message, where)
        if where.flow_id is not None and record is None:
            raise UsageError(f"no flow {where.flow_id!r}")
        fs: FlowState | None = None
        if record is not None:
            fs = FlowState(FlowKind(record.kind), Side(record.side), record.state, record.data)
            if (
                where.flow_id is None
                and not self._joins_by_ref(message)
                and not flows.accepts(fs, message, Direction.OUT)
            ):
                fs, record = None, None
        if fs is None:
            fs = flows.opening(message, Direction.OUT)
            if fs is None:
                raise UsageError(f"{message.type.upper()} needs a flow to join (give flow_id or in_reply_to)")
        step = flows.step(fs, message, Direction.OUT)
        if not step.ok:
            code = step.oops.value if step.oops else "refused"
            raise UsageError(
                f"{message.type.upper()} does not fit flow state {fs.state}: {code}: {step.detail}"
            )
        return Placed(record, fs, step)

    def _commit_of(
        self, message: Message, where: Addressing, placed: Placed, now: datetime
    ) -> tuple[Commit, Outbound]:
        """The send's one commit: the flow stepped, its log line, refs and outbox row."""
        s, record, fs, to = self.settings, placed.record, placed.fs, where.to
        fid = record.flow_id if record is not None else s.new_id("flow")
        irt, refs = where.in_reply_to, where.references
        last = fs.data.get("last_in")
        if irt is None and record is not None and isinstance(last, Mapping) and last.get("message_id"):
            irt, refs = last["message_id"], tuple(last.get("references", ()))
        ob = Outbound(
            sender=s.address,
            recipient=to,
            message=message,
            message_id=s.new_message_id(),
            date=now,
            in_reply_to=irt,
            references=refs,
            note=where.note,
        )
        new = FlowRecord(
            flow_id=fid,
            local=s.address,
            peer=to,
            kind=fs.kind.value,
            side=fs.side.value,
            state=placed.step.state,
            version=record.version if record is not None else 0,
            data=stamp_invoice(message, placed.step.data, now),
            created_at=now,
            updated_at=now,
        )
        pid = getattr(message, "id", None)
        refs_rows = ((to, s.address, pid, fid),) if isinstance(pid, str) else ()
        outcome = {"status": "sent", "flow_id": fid, "message_id": ob.message_id}
        commit = Commit(
            local=s.address,
            now=now,
            outcome=outcome,
            flow=FlowWrite(new),
            log=(out_entry(fid, ob, now),),
            refs=refs_rows,
            message_ids=((ob.message_id, fid),),
            outbox=((ob, fid),),
        )
        return commit, ob

    def bind_proof(self, message: Message, to: str) -> Message:
        """Add the payer's binding (envelopay.rails.binding) to a proof we present, when
        our rail for its chain holds the paying key; a proof already bound is kept."""
        leg = message.give if isinstance(message, Offer) else message
        chain = getattr(leg, "chain", None)
        rail = self.settings.rails.get(chain) if isinstance(chain, str) else None
        if not isinstance(rail, BindingRail):
            return message
        return bind_message(
            message,
            payee=to,
            presenter=self.settings.address,
            proof_key=rail.proof_key,
            sign=rail.sign_statement,
        )

    def _joins_by_ref(self, message: Message) -> bool:
        return any(getattr(message, f, None) for f in REF_FIELDS)

    def _outbound_flow(self, message: Message, where: Addressing) -> FlowRecord | None:
        store, address, to = self.settings.store, self.settings.address, where.to
        if where.flow_id is not None:
            return store.get_flow(where.flow_id)
        for ref in typed_refs(message):
            # Our typed refs name the peer's messages (their ORDER, INVOICE, OFFER, WHICH).
            found = store.flow_for_ref(address, to, to, ref)
            if found is not None:
                return found
        if where.in_reply_to is not None:
            found = store.flow_for_message(address, where.in_reply_to)
            if found is not None and found.peer == to:
                return found
        return None
