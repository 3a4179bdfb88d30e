"""Mail that is not protocol: a person's reply in our thread read again, or the record of
why it was not read (and at most one help note a day, when the mailbox asks for it).

SPEC.md "Replies in our thread" and "Mail that is not protocol". A collaborator of the
engine, holding its `Recorder`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.outcome import Outcome
from envelopay.engine.recorder import Recorder
from envelopay.engine.step_facts import content_hash
from envelopay.ledger.store import AnswerLimits, Claim
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.grammar import classify_subject, is_plain_reply
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parsed import Parsed

__all__ = ["HELP_NOTE", "HELP_WINDOW", "NotProtocol"]

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


class NotProtocol:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.settings = recorder.settings

    def our_reply(self, mail: InboundMail) -> Parsed | None:
        """A `Re:` reply to a message we sent this sender, read again with the body's
        JSON `type` (SPEC.md "Replies in our thread"); None when it is not one."""
        sender = mail.sender
        if mail.raw is None or sender is None or not is_plain_reply(mail.parsed.subject):
            return None
        if not any(self._sent_to(mid, sender) for mid in mail.thread[:_THREAD_LOOKUPS]):
            return None
        return self.settings.reply_parser(mail.raw)

    def _sent_to(self, message_id: str, sender: str) -> bool:
        store, address = self.settings.store, self.settings.address
        row = store.outbox_get(message_id)
        if row is not None:
            out = row.outbound
            return out.sender.lower() == address and out.recipient.lower() == sender
        # The outbox row may be compacted: the flow's log says who wrote the message.
        flow = store.flow_for_message(address, message_id)
        if flow is None or flow.peer != sender:
            return False
        log = store.flow_log(flow.flow_id)
        return any(e.direction == "out" and e.message_id == message_id for e in log)

    def record(self, mail: InboundMail, in_our_thread: bool) -> Outcome:
        """Mail that is not protocol: recorded with its reason (never silence plus no
        record), answered with one help note per sender per day when [answers] help
        is on, never when RFC 3834 says not to answer."""
        s, rec, parsed, message_id = self.settings, self.recorder, mail.parsed, mail.message_id
        assert message_id is not None
        if in_our_thread:
            reason = "a reply in our thread with no JSON object in it"
        else:
            reason = classify_subject(parsed.subject).reason or "not protocol mail"
        now = s.clock()
        claim = Claim(s.address, message_id, content_hash(parsed), s.worker_id, now, now + s.lease)
        begin = s.store.begin_step(claim)
        if begin.status in ("seen", "retransmission") and begin.outcome is not None:
            return Outcome.from_json(begin.outcome, repeat="message_id")
        if begin.status == "busy":
            return Outcome("busy", message_id, detail="claimed by another worker")
        replies: tuple[Outbound, ...] = ()
        helping = s.answer_limits is not None and s.answer_limits.help
        withheld = self._help_withheld(mail, now) if helping else None
        if helping and mail.sender is not None and withheld is None:
            note = HELP_NOTE.format(reason=reason)
            replies = (rec.reply(mail, mail.sender, rec.oops(OopsCode.UNKNOWN_TYPE, note, None), now),)
        outcome = Outcome(
            "ignored",
            message_id,
            detail=f"not protocol: {reason}",
            outbox=tuple(r.message_id for r in replies),
            unanswered=withheld,
        )
        commit = rec.flowless(mail, outcome, False, None, now, replies)
        # Drawn already (help_take): finish's own draw finds this message and says "ok".
        result = rec.finish(commit, outcome, mail)
        return result if result is not None else outcome

    def _help_withheld(self, mail: InboundMail, now: datetime) -> str | None:
        """Why no help note goes to this mail (help on), or None to send one."""
        if mail.sender is None:
            return "no_sender"
        if mail.parsed.no_answer is not None:  # list, bulk, auto-submitted mail (RFC 3834)
            return mail.parsed.no_answer
        # One note per sender per day, counted in the ledger beside the other automatic
        # answers, under a peer key of its own: the hourly per-peer draws prune only
        # their own peer's rows, so a help draw lives its full day.
        once = AnswerLimits(per_peer=1, per_thread=0, window=HELP_WINDOW)
        s = self.settings
        assert mail.message_id is not None
        drawn = s.store.answer_take(s.address, f"help:{mail.sender}", "help", mail.message_id, now, once)
        return None if drawn == "ok" else "help_sent_today"
