"""Writing a step's answers and its one commit: the I/O every inbound path ends in.

`Recorder` composes the engine's answers (an OOPS, a reply in the sender's thread),
holds back the ones RFC 3834 and the answer limits say must not go, and writes the
commit (outcome, log, outbox rows, the replay and proof fates) in one transaction, so
a redelivery gets the same answer. A `Recorder` is one of the engine's collaborators;
it holds the engine's settings (engine/settings.py), no base class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome
from envelopay.engine.poison import storable
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import reply_headers
from envelopay.ledger.store import Claim, Commit, ProofKey
from envelopay.protocol.autosubmit import AUTO_REPLIED
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import KEYWORDS
from envelopay.protocol.messages import Message, Oops, OopsError
from envelopay.protocol.outbound import Outbound

__all__ = ["Recorder", "withheld"]


def withheld(commit: Commit, outcome: Outcome, reason: str) -> tuple[Commit, Outcome]:
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


class Recorder:
    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings

    def oops(
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
        return Oops(note=text[:1000], id=self.settings.new_id("oops"), error=error, ref=safe_ref)

    def reply(self, mail: InboundMail, to: str, message: Message, now: datetime) -> Outbound:
        in_reply_to, refs = reply_headers(mail.parsed)
        return Outbound(
            sender=self.settings.address,
            recipient=to,
            message=message,
            message_id=self.settings.new_message_id(),
            date=now,
            in_reply_to=in_reply_to,
            references=refs,
            auto_submitted=AUTO_REPLIED,  # every answer the engine writes is automatic
        )

    def flowless(
        self,
        mail: InboundMail,
        outcome: Outcome,
        owns_replay: bool,
        release: ProofKey | None,
        now: datetime,
        replies: tuple[Outbound, ...] = (),
    ) -> Commit:
        """A refusal touching no flow: the outcome and replies, the (sender, id) finished
        when this message owns it, a proof it reserved released (never judged)."""
        assert mail.message_id is not None
        return Commit(
            local=self.settings.address,
            now=now,
            outcome=outcome.to_json(),
            message_id=mail.message_id,
            worker=self.settings.worker_id,
            outbox=tuple((r, None) for r in replies),
            sender=mail.sender if owns_replay else None,
            protocol_id=mail.protocol_id if owns_replay else None,
            replay_fate="done" if owns_replay else None,
            proof=release,
            proof_fate="release" if release is not None else None,
        )

    def finish(self, commit: Commit, outcome: Outcome, mail: InboundMail) -> Outcome | None:
        """Write the step: the outcome on success, the recorded one when another worker
        finished it, None on a version conflict (the caller redoes the step)."""
        assert mail.message_id is not None
        if commit.outbox:
            only_oops = all(isinstance(ob.message, Oops) for ob, _ in commit.outbox)
            paid = outcome.verdict is not None and outcome.verdict.get("status") == "ok"
            reason = self.unanswered(mail, commit.outbox[0][0].recipient, only_oops, paid)
            if reason is not None:
                commit, outcome = withheld(commit, outcome, reason)
        if mail.dkim_label is not None:  # recorded with the outcome, e.g. "pass, not aligned with From"
            outcome = replace(outcome, dkim=mail.dkim_label)
            commit = replace(commit, outcome={**commit.outcome, "dkim": mail.dkim_label})
        store = self.settings.store
        result = store.commit_step(commit)
        if result == "ok":
            return outcome
        if result == "lost":
            recorded = store.inbound_outcome(self.settings.address, mail.message_id)
            if recorded is not None:
                return Outcome.from_json(recorded, repeat="message_id")
            return Outcome("busy", mail.message_id, detail="claim lost to another worker")
        return None  # version conflict: the caller redoes the step

    def quarantine(self, mail: InboundMail, reason: str, proof: ProofKey | None) -> Outcome:
        """Record a message whose handling raised as quarantined, with the reason, and
        finish its reservations: the (sender, id) answers retransmissions with this
        outcome (never `busy` forever), a proof it reserved is released (never judged).
        Raises when even that cannot be written (the ledger is down: retry later)."""
        s = self.settings
        assert mail.message_id is not None
        now = s.clock()
        outcome = Outcome("quarantined", mail.message_id, detail=reason[:500])
        owns = mail.sender is not None and mail.protocol_id is not None
        commit = self.flowless(mail, outcome, owns, proof, now)
        for _ in range(2):
            if s.store.commit_step(commit) == "ok":
                return outcome
            recorded = s.store.inbound_outcome(s.address, mail.message_id)
            if recorded is not None:
                return Outcome.from_json(recorded, repeat="message_id")
            # It raised before the claim was taken: take one (nothing else) and record.
            claim = Claim(s.address, mail.message_id, "quarantined", s.worker_id, now, now + s.lease)
            s.store.begin_step(claim)
            commit = replace(commit, sender=None, protocol_id=None, replay_fate=None)
        return outcome

    def unanswered(self, mail: InboundMail, peer: str, only_oops: bool, paid: bool) -> str | None:
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
        parsed, s = mail.parsed, self.settings
        assert mail.message_id is not None
        if parsed.no_answer is not None and not (only_oops and parsed.no_answer == "auto_submitted"):
            return parsed.no_answer
        limits = s.answer_limits
        if limits is None or paid or (limits.per_peer <= 0 and limits.per_thread <= 0):
            return None  # both limits off: nothing to count, no write (SPEC: 0 turns a limit off)
        thread = parsed.references[0] if parsed.references else parsed.in_reply_to or mail.message_id
        drawn = s.store.answer_take(s.address, peer, thread, mail.message_id, s.clock(), limits)
        return None if drawn == "ok" else drawn
