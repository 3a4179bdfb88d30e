"""The outbound send: record a message we compose in its flow and write its outbox row.

The client role steps its own messages through the same tables as the inbound path
(direction "out"), so the buyer's flow state is tracked too. `Sending` is the half of
`envelopay.engine.inbound.Engine` that mints ids and sends; the drainer
(envelopay.engine.outbox) delivers the row afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime

from envelopay import flows
from envelopay.engine.outcome import Sent
from envelopay.engine.poison import unstorable_body
from envelopay.engine.records import MAX_CONFLICT_RETRIES, REF_FIELDS, out_entry, stamp_invoice, typed_refs
from envelopay.errors import UsageError
from envelopay.flows import Direction, FlowKind, FlowState, Side
from envelopay.ledger.jobs import JobMove
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, Store
from envelopay.protocol.messages import Message, Offer
from envelopay.protocol.outbound import Outbound
from envelopay.rails.binding import BindingRail, bind_message
from envelopay.rails.interface import Rail

__all__ = ["Sending"]


class Sending:
    """Ids and the send path of an engine; `Engine.__init__` sets these attributes."""

    store: Store
    address: str
    domain: str
    clock: Callable[[], datetime]
    id_factory: Callable[[], str]
    rails: dict[str, Rail]

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{self.id_factory()}"

    def new_message_id(self) -> str:
        return f"<{self.id_factory()}@{self.domain}>"

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
        """Record an outgoing message in its flow and write its outbox row.

        The flow is `flow_id`, else the one the message's typed refs name, else the one
        `in_reply_to` names, else the flow the message opens. A message the flow's table
        refuses raises UsageError (nothing is written). Threading headers default to a
        reply to the flow's latest inbound message. `job`: a job's move written in the same
        commit (its answer goes out once); a job no longer in its from_states raises
        UsageError, nothing written."""
        to = to.lower()
        # What no mail or ledger row can hold (a lone surrogate, NUL, too deep to serialize)
        # is refused before the first write: it used to be committed with its flow and
        # outbox row, then fail at compose in the drainer (issue 29, item 12).
        problem = unstorable_body(message, getattr(message, "id", None))
        if problem is not None:
            raise UsageError(f"{message.type.upper()}: {problem}; nothing was written")
        message = self.advertise(self.bind_proof(message, to))
        for _ in range(MAX_CONFLICT_RETRIES):
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
                data=stamp_invoice(message, step.data, now),
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
                log=(out_entry(fid, ob, now),),
                refs=tuple(refs_rows),
                message_ids=((ob.message_id, fid),),
                outbox=((ob, fid),),
                # The job's answer is this message: recorded with it.
                job_move=replace(job, fields={**job.fields, "answer_id": ob.message_id}) if job else None,
            )
            result = self.store.commit_step(commit)
            if result == "ok":
                return Sent(fid, step.state, ob.message_id, ob)
            if result == "lost" and job is not None:
                raise UsageError(f"job {job.job_id} moved on: nothing sent")
        raise RuntimeError("flow kept changing while sending; gave up after retries")

    def advertise(self, message: Message) -> Message:
        """The extensions we speak, named in an ORDER we send (engine/status.py)."""
        return message

    def bind_proof(self, message: Message, to: str) -> Message:
        """Add the payer's binding (envelopay.rails.binding) to a proof we present, when
        our rail for its chain holds the paying key; a proof already bound is kept."""
        leg = message.give if isinstance(message, Offer) else message
        chain = getattr(leg, "chain", None)
        rail = self.rails.get(chain) if isinstance(chain, str) else None
        if not isinstance(rail, BindingRail):
            return message
        return bind_message(
            message, payee=to, presenter=self.address, proof_key=rail.proof_key, sign=rail.sign_statement
        )

    def _joins_by_ref(self, message: Message) -> bool:
        return any(getattr(message, f, None) for f in REF_FIELDS)

    def _outbound_flow(
        self, message: Message, to: str, flow_id: str | None, in_reply_to: str | None
    ) -> FlowRecord | None:
        if flow_id is not None:
            return self.store.get_flow(flow_id)
        for ref in typed_refs(message):
            # Our typed refs name the peer's messages (their ORDER, INVOICE, OFFER, WHICH).
            found = self.store.flow_for_ref(self.address, to, to, ref)
            if found is not None:
                return found
        if in_reply_to is not None:
            found = self.store.flow_for_message(self.address, in_reply_to)
            if found is not None and found.peer == to:
                return found
        return None
