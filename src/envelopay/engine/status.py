"""The `status` extension in the inbound path (SPEC.md "Status while working").

A WHATSUP is answered with a WAIT naming the job's state and times; a WAIT is recorded
in its flow's log for the buyer's `order --wait` and `status` to read. Neither moves
the flow: its state and version stay, the messages are log lines beside it. Both are
claimed by Message-ID like every inbound message, so a redelivered WHATSUP gets the
recorded outcome back and no second WAIT. `tell_accepted` adds the WAIT a worker writes
in the same commit as the job it takes on, when the ORDER advertised the extension.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome, Repeat, Sent
from envelopay.engine.recorder import Recorder
from envelopay.engine.refusals import Refusals
from envelopay.engine.step_facts import Work, content_hash, out_entry
from envelopay.errors import UsageError
from envelopay.ledger.store import Claim, Commit, FlowRecord, LogEntry
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, Oops, Order, Wait, Whatsup, Which
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.status import STATUS, body_advertises, wait_message

__all__ = ["JobReport", "JobSource", "StatusDesk", "accepted_wait", "flow_report", "store_jobs"]


@dataclass(frozen=True, slots=True)
class JobReport:
    """What a WAIT says about one job: its state and when it entered each state."""

    state: str
    times: Mapping[str, datetime]


class JobSource(Protocol):
    def __call__(self, flow: FlowRecord) -> JobReport | None: ...


class _Job(Protocol):
    """The two things read from a ledger job row (ledger/jobs.py `Job`)."""

    state: str

    def times(self) -> Mapping[str, datetime]: ...


# Without a job row (a ledger before jobs, or a flow that never became one), the flow's
# own state says as much: a paid flow's work is queued, a fulfilled one is done.
_FLOW_STATES: dict[str, str] = {
    "ordered": "unpaid",
    "invoiced": "unpaid",
    "quoted": "unpaid",
    "paid": "queued",
    "prepaid": "queued",
    "fulfilled": "done",
}


def flow_report(flow: FlowRecord) -> JobReport | None:
    state = _FLOW_STATES.get(flow.state)
    return None if state is None else JobReport(state, {state: flow.updated_at})


def store_jobs(store: Any) -> JobSource:
    """The ledger's job for a flow when the store keeps jobs, else the flow's state."""

    def report(flow: FlowRecord) -> JobReport | None:
        lookup: Callable[[str], _Job | None] | None = getattr(store, "job_for_flow", None)
        job = lookup(flow.flow_id) if lookup is not None else None
        if job is None:
            return flow_report(flow)
        return JobReport(job.state, dict(job.times()))

    return report


def accepted_wait(
    order_body: Mapping[str, Any] | None, *, new_id: Callable[[str], str], now: datetime
) -> Wait | None:
    """The WAIT (`queued`) told unasked when a job is accepted; None when the ORDER did
    not advertise `status` (a strict peer gets nothing it cannot read)."""
    if order_body is None or not body_advertises(order_body):
        return None
    order_ref = order_body.get("id")
    if not isinstance(order_ref, str):
        return None
    return wait_message(
        id=new_id("wait"),
        order_ref=order_ref,
        state="queued",
        times={"queued": now},
        note="received, working on it",
    )


class StatusDesk:
    """The extension's part of an engine: a collaborator holding the engine's recorder,
    its refusals and where a job's state is read (`job_source`)."""

    def __init__(self, recorder: Recorder, refusals: Refusals, job_source: JobSource) -> None:
        self.recorder = recorder
        self.refusals = refusals
        self.settings = recorder.settings
        self.job_source = job_source

    @property
    def speaks_status(self) -> bool:
        """The mailbox reads WAIT and WHATSUP, and so tells and asks."""
        return STATUS in self.settings.extensions

    def tell_accepted(self, mail: InboundMail, message: Message, work: Work, now: datetime) -> None:
        """A job was taken on in this step: its WAIT `queued` joins the step's replies, so
        it is written in the same commit as the job (at most once, like the job row)."""
        order = message.model_dump(mode="json") if isinstance(message, Order) else work.fs.data.get("order")
        wait = accepted_wait(order, new_id=self.settings.new_id, now=now) if self.speaks_status else None
        if wait is not None:
            work.replies.append(self.recorder.reply(mail, work.peer, wait, now))

    def advertise(self, message: Message) -> Message:
        """A WHICH or ORDER we send names `status` when we speak it: the worker may then
        say it speaks it too (METHODS) and tell us how the job goes (WAIT); a strict
        worker ignores the field (spec: "Unknown fields must be ignored")."""
        if isinstance(message, Order | Which) and message.extensions is None and self.speaks_status:
            return message.model_copy(update={"extensions": [STATUS]})
        return message

    def is_status(self, message: Message | None, sender: str) -> bool:
        """The extension's to handle: a WAIT or WHATSUP (read only when we speak `status`),
        or an OOPS answering our WHATSUP."""
        return isinstance(message, Wait | Whatsup) or self.answers_our_whatsup(message, sender)

    def answers_our_whatsup(self, message: Message | None, sender: str) -> bool:
        """An OOPS whose `ref` names a WHATSUP we sent `sender`: the answer to our question,
        recorded in its flow, which it does not move (an OOPS answering a PAY would)."""
        if not isinstance(message, Oops) or message.ref is None:
            return False
        store, address = self.settings.store, self.settings.address
        flow = store.flow_for_ref(address, sender, address, message.ref)
        return flow is not None and any(
            e.direction == "out" and e.type == "whatsup" and e.protocol_id == message.ref
            for e in store.flow_log(flow.flow_id)
        )

    def _status_flow(self, message: Wait | Whatsup | Oops, sender: str) -> FlowRecord | None:
        store, address = self.settings.store, self.settings.address
        if isinstance(message, Oops):  # its `ref` is our WHATSUP's id (answers_our_whatsup)
            return store.flow_for_ref(address, sender, address, message.ref or "")
        # The buyer wrote the ORDER: its id is the buyer's (author = the buyer).
        author = sender if isinstance(message, Whatsup) else address
        flow = store.flow_for_ref(address, sender, author, message.order_ref)
        return flow if flow is not None and flow.peer == sender else None

    async def handle(self, mail: InboundMail) -> Outcome:
        """A WAIT, a WHATSUP, or an OOPS answering our WHATSUP: claimed, then recorded."""
        s, message_id, sender, message = self.settings, mail.message_id, mail.sender, mail.message
        assert message_id is not None and sender is not None and isinstance(message, Wait | Whatsup | Oops)
        now = s.clock()
        claim = Claim(
            local=s.address,
            message_id=message_id,
            content_hash=content_hash(mail.parsed),
            worker=s.worker_id,
            now=now,
            lease_until=now + s.lease,
            sender=sender,
            protocol_id=mail.protocol_id,
        )
        begin = s.store.begin_step(claim)
        if begin.status in ("seen", "retransmission"):
            assert begin.outcome is not None
            repeat: Repeat = "message_id" if begin.status == "seen" else "retransmission"
            return Outcome.from_json(begin.outcome, repeat=repeat)
        if begin.status == "busy":
            return Outcome("busy", message_id, detail="claimed by another worker")
        if begin.status == "duplicate_id":
            reused = (OopsCode.DUPLICATE_ID, "id reused with other content")
            refused = await self.refusals.early(mail, reused, False, now)
            return refused or Outcome("busy", message_id, detail="claim lost")
        flow = self._status_flow(message, sender)
        if flow is None:
            assert not isinstance(message, Oops)  # answers_our_whatsup found its flow
            return await self._unknown(mail, message, now)
        if isinstance(message, Wait | Oops):  # told, or our question refused: nothing to answer
            return self._record(mail, flow, now, ())
        report = self.job_source(flow) or flow_report(flow) or JobReport("unknown", {})
        wait = wait_message(
            id=s.new_id("wait"),
            order_ref=message.order_ref,
            state=report.state,
            times=report.times,
            ref=message.id,
        )
        return self._record(mail, flow, now, (wait,))

    async def _unknown(self, mail: InboundMail, message: Wait | Whatsup, now: datetime) -> Outcome:
        """A WHATSUP about no ORDER of this peer: OOPS unknown_ref (the asker reads OOPS,
        one of the nine). A WAIT about none: recorded, never answered (it answers nothing)."""
        assert mail.message_id is not None
        detail = f"no ORDER {message.order_ref[:80]!r} from {mail.sender}"
        if isinstance(message, Wait):
            outcome = Outcome("ignored", mail.message_id, detail=f"WAIT: {detail}")
            commit = self.recorder.flowless(mail, outcome, True, None, now)
            return self.recorder.finish(commit, outcome, mail) or outcome
        refused = await self.refusals.early(mail, (OopsCode.UNKNOWN_REF, detail), True, now)
        return refused or Outcome("busy", mail.message_id, detail="claim lost")

    def _record(
        self, mail: InboundMail, flow: FlowRecord, now: datetime, answers: tuple[Wait, ...]
    ) -> Outcome:
        """Log the message (and its answer) in the flow, leaving the flow as it is."""
        s, message_id, sender, message = self.settings, mail.message_id, mail.sender, mail.message
        assert message_id is not None and sender is not None and isinstance(message, Wait | Whatsup | Oops)
        replies = tuple(self.recorder.reply(mail, sender, w, now) for w in answers)
        oops = message.error.code if isinstance(message, Oops) and message.error is not None else None
        in_entry = LogEntry(
            flow.flow_id,
            now,
            "in",
            message.type,
            message_id,
            message.id,
            sender,
            s.address,
            message.model_dump(mode="json"),
            oops=oops,
        )
        detail = f"{message.type.upper()} {getattr(message, 'state', '')}".strip()
        if isinstance(message, Oops):
            detail = f"OOPS {oops or '?'} answering our WHATSUP"
        outcome = Outcome(
            "processed",
            message_id,
            flow_id=flow.flow_id,
            state=flow.state,
            detail=detail,
            outbox=tuple(r.message_id for r in replies),
        )
        commit = Commit(
            local=s.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=message_id,
            worker=s.worker_id,
            log=(in_entry, *(out_entry(flow.flow_id, r, now) for r in replies)),
            message_ids=((message_id, flow.flow_id), *((r.message_id, flow.flow_id) for r in replies)),
            outbox=tuple((r, flow.flow_id) for r in replies),
            sender=sender,
            protocol_id=mail.protocol_id,
            replay_fate="done",
        )
        return self.recorder.finish(commit, outcome, mail) or outcome

    def send_whatsup(self, flow_id: str, note: str | None = None) -> Sent:
        """Ask the worker of our order flow `flow_id` how its job goes: a WHATSUP logged
        in the flow (its state unchanged) and written to the outbox in one commit."""
        s = self.settings
        flow = s.store.get_flow(flow_id)
        order = flow.data.get("order") if flow is not None else None
        if flow is None or flow.side != "payer" or not isinstance(order, Mapping):
            raise UsageError(f"no order flow {flow_id!r} of ours to ask about")
        now = s.clock()
        last = flow.data.get("last_in")
        irt, refs = (None, ())
        if isinstance(last, Mapping) and isinstance(last.get("message_id"), str):
            irt, refs = last["message_id"], tuple(last.get("references", ()))
        ask = Whatsup(id=s.new_id("wsup"), order_ref=str(order.get("id")), note=note)
        ob = Outbound(s.address, flow.peer, ask, s.new_message_id(), now, irt, refs)
        outcome = {"status": "sent", "flow_id": flow_id, "message_id": ob.message_id}
        commit = Commit(
            local=s.address,
            now=now,
            outcome=outcome,
            log=(out_entry(flow_id, ob, now),),
            refs=((flow.peer, s.address, ask.id, flow_id),),
            message_ids=((ob.message_id, flow_id),),
            outbox=((ob, flow_id),),
        )
        if s.store.commit_step(commit) != "ok":
            raise RuntimeError("the WHATSUP could not be recorded")
        return Sent(flow_id, flow.state, ob.message_id, ob)
