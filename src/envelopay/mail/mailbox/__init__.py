"""The agent mailbox: Maildir folders with a small SQLite index, and the actions agents use.

Read top down; each module depends only on those listed above it:

    inputs       what is refused before any I/O, and MailboxError (pure)
    records      MailRecord, CheckFilter, OutgoingMail, SendResult (pure)
    interpret    what stored bytes say: headers, body, attachments, status (pure)
    threads      thread grouping and the headers/recipients of a reply (pure)
    storage      the Maildir folders under <agent>/mailbox/ and their layout
    attachments  received attachments extracted, outgoing ones confined to the agent dir
    index        the SQLite index and the queries of check and search
    guard        the send log and the duplicate-send guard
    outgoing     plain mail composed; the SMTP send function
    actions      `Mailbox`: every action, joining the parts above

Users import from here: `from envelopay.mail.mailbox import Mailbox, MailboxError`.
"""

from envelopay.mail.mailbox.actions import MALFORMED_FLAG, Mailbox
from envelopay.mail.mailbox.inputs import FOLDERS, MAX_BODY_CHARS, Folder, MailboxError
from envelopay.mail.mailbox.outgoing import smtp_send_fn
from envelopay.mail.mailbox.records import (
    Attachment,
    CheckFilter,
    MailRecord,
    OutgoingMail,
    SendFn,
    SendResult,
)

__all__ = [
    "FOLDERS",
    "MALFORMED_FLAG",
    "MAX_BODY_CHARS",
    "Attachment",
    "CheckFilter",
    "Folder",
    "MailRecord",
    "Mailbox",
    "MailboxError",
    "OutgoingMail",
    "SendFn",
    "SendResult",
    "smtp_send_fn",
]
