"""Every way the inbound path says no: an OOPS reply (or silence), recorded in one commit.

`_refuse_early` refuses before any flow is touched (parse problems, DKIM, replays,
threading); `_commit_refused` refuses inside a flow (a message its table does not
accept, a proof that fails its check). Both write the outcome, the reply and the
replay/proof fates in the same transaction as the rest of a step
(envelopay.engine.inbound), so a redelivery gets the same answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Literal

from envelopay.engine.alignment import _dkim_label
from envelopay.engine.outcome import Outcome
from envelopay.engine.poison import storable
from envelopay.engine.records import Work, content_hash, out_entry, proof_of, reply_headers
from envelopay.engine.send import Sending
from envelopay.ledger.store import AnswerLimits, Claim, Commit, LogEntry, ProofKey
from envelopay.protocol.autosubmit import AUTO_REPLIED
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import KEYWORDS, classify_subject, is_plain_reply
from envelopay.protocol.messages import Message, MessageType, Oops, OopsError, is_proof_carrying
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parsed import Parsed

__all__ = ["HELP_NOTE", "HELP_WINDOW", "Refusals"]

# The one help note a person who writes prose gets per day, when the mailbox answers
# prose at all ([answers] help = true; SPEC.md "Mail that is not protocol").
HELP_NOTE = (
    "this address reads Envelopay mail only: a subject `TYPE | note` and a JSON body;"
    " your mail was not read as a request ({reason}). Send WHICH to ask what it offers,"
    " or reply to its INVOICE with the PAY JSON at the top. (At most one such note a day.)"
)
HELP_WINDOW = timedelta(days=1)
# How many thread ids (In-Reply-To, then References) are looked up to know a reply.
_THREAD_LOOKUPS = 20


def _withheld(commit: Commit, outcome: Outcome, reason: str) -> tuple[Commit, Outcome]:
    """A step whose answers are not sent: everything else as it was (the flow advances,
    the money is recorded), its outbox rows written `held` with the reason, its log
    lines for them marked, and the outcome saying why (no rows for a retransmission to
    send again)."""
    held = {ob.message_id for ob, _ in commit.outbox}
    mark = {"status": "unanswered", "reason": reason}
    log = tuple(
        replace(e, verdict=mark) if e.direction == "out" and e.message_id in held else e for e in commit.log
    )
    outcome = replace(outcome, unanswered=reason, outbox=())
    return replace(commit, hold=reason, log=log, outcome=outcome.to_json()), outcome


class Refusals(Sending):
    """The refusal half of an Engine; `Engine.__init__` sets `worker_id`."""

    worker_id: str
    lease: timedelta
    answer_limits: AnswerLimits | None
    reply_parser: Callable[[bytes], Parsed]

    def _oops(
        self, code: OopsCode, note: str, ref: str | None, extra: Mapping[str, Any] | None = None
    ) -> Oops:
        # A received id becomes our `ref` only when it is a valid id (it may be "", huge,
        # or not valid Unicode); building an OOPS must never raise.
        safe_ref = ref if isinstance(ref, str) and 0 < len(ref) <= 256 and storable(ref) else None
        note = note.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
        text = f"{code.value}: {note}" if note else code.value
        if code is OopsCode.UNKNOWN_TYPE:
            # Spec: reply OOPS with unknown_type "and the list of supported types".
            error = OopsError(code=code.value, supported=list(KEYWORDS))
            text = f"{text} (supported: {', '.join(KEYWORDS)})"
        else:
            # Extension fields (a refund: SPEC.md "Refunds") ride in `error`, whose unknown
            # fields a strict peer ignores.
            error = OopsError(code=code.value, **dict(extra or {}))
        return Oops(note=text[:1000], id=self.new_id("oops"), error=error, ref=safe_ref)

    def _reply(self, parsed: Parsed, to: str, message: Message, now: datetime) -> Outbound:
        in_reply_to, refs = reply_headers(parsed)
        return Outbound(
            sender=self.address,
            recipient=to,
            message=message,
            message_id=self.new_message_id(),
            date=now,
            in_reply_to=in_reply_to,
            references=refs,
            auto_submitted=AUTO_REPLIED,  # every answer the engine writes is automatic
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
        commit = self._flowless_commit(
            parsed, outcome, message_id, sender, owns_replay, release, now, replies
        )
        return self._finish(commit, outcome, message_id, parsed)

    def _flowless_commit(
        self,
        parsed: Parsed,
        outcome: Outcome,
        message_id: str,
        sender: str | None,
        owns_replay: bool,
        release: ProofKey | None,
        now: datetime,
        replies: tuple[Outbound, ...] = (),
    ) -> Commit:
        """A refusal touching no flow: the outcome and replies, the (sender, id) finished
        when this message owns it, a proof it reserved released (never judged)."""
        return Commit(
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

    def _quarantine(
        self, parsed: Parsed, message_id: str, sender: str | None, reason: str, proof: ProofKey | None
    ) -> Outcome:
        """Record a message whose handling raised as quarantined, with the reason, and
        finish its reservations: the (sender, id) answers retransmissions with this
        outcome (never `busy` forever), a proof it reserved is released (never judged).
        Raises when even that cannot be written (the ledger is down: retry later)."""
        now = self.clock()
        outcome = Outcome("quarantined", message_id, detail=reason[:500])
        owns = sender is not None and parsed.id is not None
        commit = self._flowless_commit(parsed, outcome, message_id, sender, owns, proof, now)
        for _ in range(2):
            if self.store.commit_step(commit) == "ok":
                return outcome
            recorded = self.store.inbound_outcome(self.address, message_id)
            if recorded is not None:
                return Outcome.from_json(recorded, repeat="message_id")
            # It raised before the claim was taken: take one (nothing else) and record.
            claim = Claim(self.address, message_id, "quarantined", self.worker_id, now, now + self.lease)
            self.store.begin_step(claim)
            commit = replace(commit, sender=None, protocol_id=None, replay_fate=None)
        return outcome

    def _finish(
        self, commit: Commit, outcome: Outcome, message_id: str, parsed: Parsed | None = None
    ) -> Outcome | None:
        if commit.outbox and parsed is not None:
            only_oops = all(isinstance(ob.message, Oops) for ob, _ in commit.outbox)
            paid = outcome.verdict is not None and outcome.verdict.get("status") == "ok"
            reason = self._unanswered(parsed, message_id, commit.outbox[0][0].recipient, only_oops, paid)
            if reason is not None:
                commit, outcome = _withheld(commit, outcome, reason)
        label = _dkim_label.get()
        if label is not None:  # recorded with the outcome, e.g. "pass, not aligned with From"
            outcome = replace(outcome, dkim=label)
            commit = replace(commit, outcome={**commit.outcome, "dkim": label})
        result = self.store.commit_step(commit)
        if result == "ok":
            return outcome
        if result == "lost":
            recorded = self.store.inbound_outcome(self.address, message_id)
            if recorded is not None:
                return Outcome.from_json(recorded, repeat="message_id")
            return Outcome("busy", message_id, detail="claim lost to another worker")
        return None  # version conflict: the caller redoes the step

    def _commit_refused(
        self,
        parsed: Parsed,
        message_id: str,
        sender: str,
        work: Work,
        in_entry: LogEntry,
        now: datetime,
        *,
        state: str,
        oops: OopsCode | None,
        detail: str,
        answer: bool,
        proof: ProofKey | None,
        proof_fate: Literal["spend", "release"] | None,
        replay_fate: Literal["done", "release"] | None = "done",
        verdict: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> Outcome | None:
        """A refusal in a flow (a table's no, or a failed proof): the OOPS (when `answer`
        and there is a code) and the log, in an existing flow only; `state` unchanged."""
        replies: list[Outbound] = []
        if oops is not None and answer:
            replies.append(self._reply(parsed, sender, self._oops(oops, detail, parsed.id, extra), now))
        existing = work.version > 0
        outcome = Outcome(
            "refused",
            message_id,
            flow_id=work.flow_id if existing else None,
            state=state if existing else None,
            oops=oops,
            detail=detail,
            outbox=tuple(r.message_id for r in replies),
            verdict=verdict,
        )
        log = [replace(in_entry, verdict=verdict, oops=oops.value if oops else None)]
        log += [out_entry(work.flow_id, r, now) for r in replies]
        commit = Commit(
            local=self.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=message_id,
            worker=self.worker_id,
            log=tuple(log) if existing else (),
            outbox=tuple((r, work.flow_id if existing else None) for r in replies),
            proof=proof,
            proof_fate=proof_fate,
            proof_verdict=verdict,
            sender=sender,
            protocol_id=parsed.id,
            replay_fate=replay_fate,
        )
        return self._finish(commit, outcome, message_id, parsed)

    # ------------------------------------------------------------ mail that is not protocol
    def _our_reply(self, parsed: Parsed, sender: str | None, raw: bytes | None) -> Parsed | None:
        """A `Re:` reply to a message we sent this sender, read again with the body's
        JSON `type` (SPEC.md "Replies in our thread"); None when it is not one."""
        if raw is None or sender is None or not is_plain_reply(parsed.subject):
            return None
        if not any(self._sent_to(mid, sender) for mid in self._thread(parsed)[:_THREAD_LOOKUPS]):
            return None
        return self.reply_parser(raw)

    def _sent_to(self, message_id: str, sender: str) -> bool:
        row = self.store.outbox_get(message_id)
        if row is not None:
            out = row.outbound
            return out.sender.lower() == self.address and out.recipient.lower() == sender
        # The outbox row may be compacted: the flow's log says who wrote the message.
        flow = self.store.flow_for_message(self.address, message_id)
        if flow is None or flow.peer != sender:
            return False
        log = self.store.flow_log(flow.flow_id)
        return any(e.direction == "out" and e.message_id == message_id for e in log)

    def _not_protocol(
        self, parsed: Parsed, message_id: str, sender: str | None, in_our_thread: bool
    ) -> Outcome:
        """Mail that is not protocol: recorded with its reason (never silence plus no
        record), answered with one help note per sender per day when [answers] help
        is on, never when RFC 3834 says not to answer."""
        if in_our_thread:
            reason = "a reply in our thread with no JSON object in it"
        else:
            reason = classify_subject(parsed.subject).reason or "not protocol mail"
        now = self.clock()
        claim = Claim(self.address, message_id, content_hash(parsed), self.worker_id, now, now + self.lease)
        begin = self.store.begin_step(claim)
        if begin.status in ("seen", "retransmission") and begin.outcome is not None:
            return Outcome.from_json(begin.outcome, repeat="message_id")
        if begin.status == "busy":
            return Outcome("busy", message_id, detail="claimed by another worker")
        replies: tuple[Outbound, ...] = ()
        helping = self.answer_limits is not None and self.answer_limits.help
        withheld = self._help_withheld(parsed, message_id, sender, now) if helping else None
        if helping and sender is not None and withheld is None:
            note = HELP_NOTE.format(reason=reason)
            replies = (self._reply(parsed, sender, self._oops(OopsCode.UNKNOWN_TYPE, note, None), now),)
        outcome = Outcome(
            "ignored", message_id, detail=f"not protocol: {reason}",
            outbox=tuple(r.message_id for r in replies), unanswered=withheld,
        )
        commit = self._flowless_commit(parsed, outcome, message_id, None, False, None, now, replies)
        # Drawn already (help_take): _finish's own draw finds this message and says "ok".
        result = self._finish(commit, outcome, message_id, parsed)
        return result if result is not None else outcome

    def _help_withheld(
        self, parsed: Parsed, message_id: str, sender: str | None, now: datetime
    ) -> str | None:
        """Why no help note goes to this mail (help on), or None to send one."""
        if sender is None:
            return "no_sender"
        if parsed.no_answer is not None:  # list, bulk, auto-submitted mail (RFC 3834)
            return parsed.no_answer
        # One note per sender per day, counted in the ledger beside the other automatic
        # answers, under a peer key of its own: the hourly per-peer draws prune only
        # their own peer's rows, so a help draw lives its full day.
        once = AnswerLimits(per_peer=1, per_thread=0, window=HELP_WINDOW)
        drawn = self.store.answer_take(self.address, f"help:{sender}", "help", message_id, now, once)
        return None if drawn == "ok" else "help_sent_today"

    def _unanswered(
        self, parsed: Parsed, message_id: str, peer: str, only_oops: bool, paid: bool
    ) -> str | None:
        """Why the answers to this message must not be sent, or None to send them.

        RFC 3834 §2: "an automatic responder MUST NOT blindly send a response for every
        message received"; the message's own signals first (protocol.autosubmit), then
        the per-peer rate limit and the per-thread loop detector, drawn in the ledger.

        One exception, to Auto-Submitted alone: a peer's worker marks every answer it
        sends, and refusing one of them (a forged ACCEPT, an INVOICE that does not fit)
        must reach that worker, whose flow waits on it. An OOPS is never answered by a
        conforming peer, so it cannot loop; the limits still count it. List and bulk
        mail, a null return path and a robot's address get no OOPS either.

        The limits never hold what a verified payment bought (`paid`: the FULFILL of a
        PAY, the ACCEPT of an OFFER): the money moved, so the answer is owed, and a loop
        that pays on-chain each turn is a customer, not a robot. It is not counted."""
        if parsed.no_answer is not None and not (only_oops and parsed.no_answer == "auto_submitted"):
            return parsed.no_answer
        if self.answer_limits is None or paid:
            return None
        thread = parsed.references[0] if parsed.references else parsed.in_reply_to or message_id
        limits = self.answer_limits
        drawn = self.store.answer_take(self.address, peer, thread, message_id, self.clock(), limits)
        return None if drawn == "ok" else drawn

    # Shared by the inbound path and its refusals: the thread a message names, and the
    # replay key of the proof it carries.
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
        chain, proof = proof_of(message)
        rail = self.rails.get(chain)
        if rail is None:
            return None, (OopsCode.UNSUPPORTED_RAIL, f"no rail for chain {chain!r} here")
        try:
            return ProofKey(chain, rail.proof_key(proof)), None
        except ValueError as exc:
            return None, (OopsCode.INVALID_FIELD, f"proof: {exc}")
