"""Outgoing plain mail: composed from validated fields, and handed to SMTP submission.

`compose_plain` refuses bad input before it reads anything (the attachments are read
last); protocol mail is composed by envelopay.protocol.compose instead. `smtp_send_fn`
is the usual send function; the mailbox never signs or talks to a server itself.
"""

from __future__ import annotations

import mimetypes
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any, NamedTuple

from envelopay.mail.mailbox.attachments import attachment_source
from envelopay.mail.mailbox.inputs import check_body, check_message_id, header_text, single_address
from envelopay.mail.mailbox.records import OutgoingMail, SendFn, SendResult
from envelopay.mail.transport.smtp import send_raw
from envelopay.protocol.compose import new_message_id

__all__ = ["PlainDraft", "compose_plain", "smtp_send_fn"]


class PlainDraft(NamedTuple):
    """What the sender asked for, not yet checked."""

    to: str
    subject: str
    body: str
    cc: Iterable[str]
    attachments: Iterable[str | Path]
    in_reply_to: str | None
    references: Sequence[str]


def compose_plain(
    sender: str, draft: PlainDraft, *, agent_dir: Path, now: datetime
) -> tuple[bytes, OutgoingMail]:
    """A plain text message from `sender`; attachments must lie inside `agent_dir`."""
    rcpt = single_address("to", draft.to).lower()
    ccs = tuple(single_address("cc", c).lower() for c in draft.cc)
    subject = header_text("subject", draft.subject)
    body = draft.body
    check_body(body)
    files = [attachment_source(agent_dir, p) for p in draft.attachments]
    in_reply_to, references = draft.in_reply_to, draft.references
    if in_reply_to is not None:
        check_message_id("in_reply_to", in_reply_to)
    for r in references:
        check_message_id("references", r)
    msg = EmailMessage(policy=policy.SMTP)
    msg["From"] = sender
    msg["To"] = rcpt
    if ccs:
        msg["Cc"] = ", ".join(ccs)
    msg["Subject"] = subject
    msg["Date"] = format_datetime(now)
    message_id = new_message_id(sender.rpartition("@")[2])
    msg["Message-ID"] = message_id
    if in_reply_to is not None:
        msg["In-Reply-To"] = in_reply_to
    if references:
        msg["References"] = " ".join(references)
    msg.set_content(body)
    for f in files:
        ctype = mimetypes.guess_type(f.name)[0] or "application/octet-stream"
        maintype, _, subtype = ctype.partition("/")
        msg.add_attachment(f.read_bytes(), maintype=maintype, subtype=subtype, filename=f.name)
    raw = msg.as_bytes()
    return raw, OutgoingMail(sender, (rcpt, *ccs), raw, message_id)


def smtp_send_fn(config: Any) -> SendFn:
    """A `SendFn` over SMTP submission (envelopay.mail.transport.smtp; `config` is its SmtpConfig).

    One transaction per recipient (raw bytes, never re-flattened). The verdict is `sent`
    only when every recipient was accepted; otherwise `failed`, naming who got it."""
    async def send(out: OutgoingMail) -> SendResult:
        accepted: list[str] = []
        for rcpt in out.recipients:
            res = await send_raw(out.raw, sender=out.sender, recipient=rcpt, config=config)
            if not res.ok:
                done = f"; accepted for {', '.join(accepted)}" if accepted else ""
                return SendResult(
                    "failed", f"{rcpt}: {res.status} {res.code or ''} {res.detail}{done}".strip()
                )
            accepted.append(rcpt)
        return SendResult("sent")

    return send


def signed_send_fn(send: SendFn, sign: Callable[[bytes], bytes]) -> SendFn:
    """`send`, each message DKIM-signed first (the agent's key: every path that sends its
    mail signs when the config names one)."""
    async def signed(out: OutgoingMail) -> SendResult:
        return await send(replace(out, raw=sign(out.raw)))

    return signed
