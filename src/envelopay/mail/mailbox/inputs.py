"""What the mailbox refuses before any I/O, and the error it refuses with (pure).

Every check raises `MailboxError` (a `UsageError` carrying a stable `code` and the
`field` at fault): an unknown folder or id, several addresses or CR/LF in a
single-address field, header text with CR/LF/NUL or over 900 characters, a body over
50,000 characters, something that is not a Message-ID.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from envelopay.errors import UsageError
from envelopay.mail.addresses import AddressProblem, parse_address

__all__ = [
    "FOLDERS",
    "MAX_BODY_CHARS",
    "MSGID_RE",
    "Folder",
    "MailboxError",
    "check_body",
    "check_folder",
    "check_id",
    "check_message_id",
    "header_text",
    "single_address",
]

Folder = Literal["inbox", "sent", "archive", "outbox"]
FOLDERS: tuple[Folder, ...] = ("inbox", "sent", "archive", "outbox")
MAX_BODY_CHARS = 50_000  # seed: "capped at 50,000 Unicode characters and is rejected, not truncated"
MSGID_RE = re.compile(r"<[^<>\s]{1,250}@[^<>\s]{1,250}>")
_ID_RE = re.compile(r"[0-9a-f]{12}")


class MailboxError(UsageError):
    """A refused mailbox action: `code` is stable, `field` names the input at fault."""

    def __init__(self, code: str, detail: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {detail}" if field else detail)
        self.code = code
        self.detail = detail
        self.field = field

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "field": self.field, "detail": self.detail}


def check_folder(folder: str) -> Folder:
    if folder not in FOLDERS:
        raise MailboxError("invalid_folder", f"{folder!r} is not one of {', '.join(FOLDERS)}", "folder")
    return folder


def check_id(mid: str) -> str:
    if not isinstance(mid, str) or not _ID_RE.fullmatch(mid):
        raise MailboxError(
            "not_found", f"{mid!r} is not a mailbox id (12 hex digits from check/search)", "id"
        )
    return mid


def single_address(field: str, value: str | None) -> str:
    """Exactly one bare address (display name tolerated) or MailboxError naming the field."""
    if value is None:
        raise MailboxError("invalid_address", "an address is required", field)
    parsed = parse_address(value, allow_display_name=True)
    if isinstance(parsed, AddressProblem):
        raise MailboxError("invalid_address", f"{parsed.reason}: {parsed.detail}", field)
    return parsed.addr


def header_text(field: str, value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise MailboxError("header_injection", "CR, LF or NUL is not allowed", field)
    if len(value) > 900:
        raise MailboxError("invalid_field", "longer than 900 characters", field)
    return value


def check_message_id(field: str, value: str) -> str:
    if not MSGID_RE.fullmatch(header_text(field, value)):
        raise MailboxError("invalid_field", "not a Message-ID like <id@domain>", field)
    return value


def check_body(body: str) -> None:
    if len(body) > MAX_BODY_CHARS:
        raise MailboxError(
            "body_too_long",
            f"{len(body)} characters; the limit is {MAX_BODY_CHARS} (rejected, not truncated)",
            "message",
        )
