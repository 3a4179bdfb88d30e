"""Every way the inbound path says no inside the protocol: an OOPS reply (or silence),
recorded in one commit.

`Refusals.early` refuses before any flow is touched (parse problems, DKIM, replays,
threading); `Refusals.in_flow` refuses inside a flow (a message its table does not
accept, a proof that fails its check), with what to record as one `FlowRefusal`. Both
write the outcome, the reply and the replay/proof fates in the same transaction as the
rest of a step (envelopay.engine.inbound), so a redelivery gets the same answer. Mail
that is not protocol at all is engine/not_protocol.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome
from envelopay.engine.recorder import Recorder
from envelopay.engine.step_facts import Work, out_entry
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite, LogEntry, ProofKey
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import MessageType
from envelopay.protocol.outbound import Outbound

__all__ = ["FlowRefusal", "Refusals"]


@dataclass(frozen=True, slots=True)
class FlowRefusal:
    """What a refusal inside a flow records: the OOPS `oops` (sent when `answer`), the
    flow's `state` unchanged, the proof and its fate, the (sender, id)'s fate, the rail's
    verdict, and extension fields of the OOPS (a refund)."""

    state: str
    oops: OopsCode | None
    detail: str
    answer: bool
    proof: ProofKey | None
    proof_fate: Literal["spend", "release"] | None
    replay_fate: Literal["done", "release"] | None = "done"
    verdict: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] | None = None


class Refusals:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def early(
        self,
        mail: InboundMail,
        problem: tuple[OopsCode, str] | None,
        owns_replay: bool,
        now: datetime,
        release: ProofKey | None = None,
    ) -> Outcome | None:
        """Refuse before any flow is touched: parse problems, DKIM, replays, threading.
        `release` is a proof reserved for this message but never judged."""
        assert mail.message_id is not None and mail.sender is not None
        code, detail = problem if problem is not None else (None, "")
        rec = self.recorder
        replies: tuple[Outbound, ...] = ()
        # An OOPS, or a message the parser says answers nothing, gets silence.
        # An unknown keyword (type None) is answered too: the spec asks for unknown_type.
        if code is not None and mail.parsed.type is not MessageType.OOPS:
            replies = (rec.reply(mail, mail.sender, rec.oops(code, detail, mail.protocol_id), now),)
        outcome = Outcome(
            "refused" if code is not None else "ignored",
            mail.message_id,
            oops=code,
            detail=detail,
            outbox=tuple(r.message_id for r in replies),
        )
        commit = rec.flowless(mail, outcome, owns_replay, release, now, replies)
        return rec.finish(commit, outcome, mail)

    def in_flow(
        self, mail: InboundMail, work: Work, in_entry: LogEntry, now: datetime, refusal: FlowRefusal
    ) -> Outcome | None:
        """A refusal in a flow (a table's no, or a failed proof): the OOPS (when `answer`
        and there is a code) and the log, in an existing flow only; the state unchanged."""
        assert mail.message_id is not None and mail.sender is not None
        rec, r = self.recorder, refusal
        replies: list[Outbound] = []
        if r.oops is not None and r.answer:
            oops = rec.oops(r.oops, r.detail, mail.protocol_id, r.extra)
            replies.append(rec.reply(mail, mail.sender, oops, now))
        existing = work.version > 0
        outcome = Outcome(
            "refused",
            mail.message_id,
            flow_id=work.flow_id if existing else None,
            state=r.state if existing else None,
            oops=r.oops,
            detail=r.detail,
            outbox=tuple(ob.message_id for ob in replies),
            verdict=r.verdict,
        )
        log = [replace(in_entry, verdict=r.verdict, oops=r.oops.value if r.oops else None)]
        log += [out_entry(work.flow_id, ob, now) for ob in replies]
        commit = Commit(
            local=rec.settings.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=mail.message_id,
            worker=rec.settings.worker_id,
            log=tuple(log) if existing else (),
            outbox=tuple((ob, work.flow_id if existing else None) for ob in replies),
            proof=r.proof,
            proof_fate=r.proof_fate,
            proof_verdict=r.verdict,
            sender=mail.sender,
            protocol_id=mail.protocol_id,
            replay_fate=r.replay_fate,
            flow=_with_refund(work, r, rec.settings.address, mail.sender, now) if existing else None,
        )
        return rec.finish(commit, outcome, mail)


def _with_refund(work: Work, r: FlowRefusal, local: str, peer: str, now: datetime) -> FlowWrite | None:
    """An underpayment paid back (the OOPS's `refund`) is kept in the flow's data too, its
    state unchanged, so the worker's `show FLOW` and console list it (SPEC.md "Refunds")."""
    refund = (r.extra or {}).get("refund")
    if not isinstance(refund, Mapping):
        return None
    fs = work.start if work.start is not None else work.fs
    record = FlowRecord(work.flow_id, local, peer, fs.kind.value, fs.side.value, fs.state, work.version,
                        {**fs.data, "refund": dict(refund)}, now, now)
    return FlowWrite(record)
