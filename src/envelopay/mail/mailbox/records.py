"""The values the mailbox hands out and takes in (pure): a stored message as indexed,
the `check` filter, and what passes to and from the send function."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

from envelopay.mail.mailbox.inputs import MailboxError

__all__ = [
    "MAX_RESULTS", "Attachment", "CheckFilter", "MailRecord", "OutgoingMail", "Progress", "SendFn",
    "SendResult",
]

# A long first open or an index upgrade reports (messages done so far, messages in all).
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str
    content_type: str
    size: int
    path: str | None = None  # where the extracted copy lives (received mail)

    def as_dict(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "content_type": self.content_type,
            "size": self.size,
            "path": self.path,
        }


@dataclass(frozen=True, slots=True)
class MailRecord:
    """One indexed message. `body` is the text body (see `body_complete`); `preview` its
    possibly truncated form."""

    id: str
    folder: str
    message_id: str | None
    from_addr: str
    to_addrs: tuple[str, ...]
    cc_addrs: tuple[str, ...]
    subject: str
    date: datetime  # when it entered this mailbox (received or sent), UTC
    header_date: str | None
    in_reply_to: str | None
    references: tuple[str, ...]
    reply_to: str | None
    body: str
    attachments: tuple[Attachment, ...]
    read: bool
    status: str  # "ok" | "malformed"
    problems: tuple[str, ...]
    protocol_type: str | None
    preview: str = ""
    # False when `body` holds only the index's first characters (a listing); the
    # mailbox reads the file when a caller wants the whole body (read, truncate 0).
    body_complete: bool = True

    @property
    def written(self) -> datetime | None:
        """When the mail says it was written: its Date header in UTC (RFC 5322 3.6.1, "the
        date and time at which the creator of the message indicated that the message was
        complete"); None without one, or with one that names no time zone or is unreadable."""
        try:
            when = parsedate_to_datetime(self.header_date) if self.header_date else None
        except (TypeError, ValueError):
            return None
        return when.astimezone(UTC) if when is not None and when.tzinfo is not None else None

    def as_dict(self, *, with_body: bool = True) -> dict[str, Any]:
        written = self.written
        out: dict[str, Any] = {
            "id": self.id,
            "folder": self.folder,
            "message_id": self.message_id,
            "from": self.from_addr,
            "to": list(self.to_addrs),
            "cc": list(self.cc_addrs),
            "subject": self.subject,
            "date": self.date.isoformat(),  # the index's: the order lists and --after/--before use
            "indexed": self.date.isoformat(),
            "written": written.isoformat() if written is not None else None,
            "in_reply_to": self.in_reply_to,
            "references": list(self.references),
            "read": self.read,
            "status": self.status,
            "problems": list(self.problems),
            "protocol_type": self.protocol_type,
            "attachments": [a.as_dict() for a in self.attachments],
        }
        if with_body:
            out["body"] = self.body
        else:
            out["preview"] = self.preview
        return out


MAX_RESULTS = 10_000  # the most one check or search returns


@dataclass(frozen=True, slots=True)
class CheckFilter:
    """`check` selectors (seed: "Its only filter object supports ...")."""

    from_: str | None = None
    subject: str | None = None
    contains: str | None = None
    after: datetime | None = None
    before: datetime | None = None
    unread_only: bool = False
    has_attachments: bool | None = None
    sort: Literal["newest", "oldest"] = "newest"
    n: int = 10
    truncate: int = 500  # preview characters; 0 = the full body

    def __post_init__(self) -> None:
        if self.sort not in ("newest", "oldest"):
            raise MailboxError("invalid_filter", "must be newest or oldest", "sort")
        if not 1 <= self.n <= MAX_RESULTS:  # past it SQLite's LIMIT overflows; page with --before
            raise MailboxError("invalid_filter", f"must be 1 to {MAX_RESULTS:,}", "n")
        if self.truncate < 0:
            raise MailboxError("invalid_filter", "must be 0 (full body) or more", "truncate")
        for name in ("after", "before"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise MailboxError(
                    "invalid_filter", "timestamp needs a timezone (ISO 8601 with offset)", name
                )


@dataclass(frozen=True, slots=True)
class OutgoingMail:
    """What the send function receives: exact bytes and the envelope."""

    sender: str
    recipients: tuple[str, ...]
    raw: bytes
    message_id: str


@dataclass(frozen=True, slots=True)
class SendResult:
    """The send function's verdict. Only `sent` moves the mail to `sent` and counts for
    the duplicate guard; `pending_approval`/`unknown` leave it in the outbox."""

    status: Literal["sent", "pending_approval", "blocked", "failed", "unknown"]
    detail: str = ""
    id: str | None = None  # mailbox id of the stored copy (sent or outbox)
    message_id: str | None = None


SendFn = Callable[[OutgoingMail], Awaitable[SendResult]]
