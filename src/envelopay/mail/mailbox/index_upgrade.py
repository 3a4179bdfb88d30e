"""Upgrade an index written before issue 17 (bodies in the row, no FTS, no thread table).

Every row is indexed again from what it holds, with its id, folder, time and read mark
kept; the file's place is learnt on first use (`Mailbox._path_of` looks it up once).
Runs inside the opening index's transaction: an interrupted upgrade leaves the old table.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.records import Attachment

if TYPE_CHECKING:
    from envelopay.mail.mailbox.index import MailIndex

__all__ = ["upgrade_v1"]


def upgrade_v1(index: MailIndex) -> int:
    rows = index.db.execute("SELECT * FROM messages_v1 ORDER BY rowid").fetchall()
    for r in rows:
        info = Interpretation(
            message_id=r["message_id"],
            from_addr=r["from_addr"],
            to_addrs=json.loads(r["to_addrs"]),
            cc_addrs=json.loads(r["cc_addrs"]),
            subject=r["subject"],
            header_date=r["header_date"],
            in_reply_to=r["in_reply_to"],
            references=json.loads(r["refs"]),
            reply_to=r["reply_to"],
            body=r["body"],
            protocol_type=r["protocol_type"],
            status=r["status"],
            problems=json.loads(r["problems"]),
        )
        atts = [Attachment(**a) for a in json.loads(r["attachments"])]
        index.add(
            r["id"],
            r["folder"],
            r["name"],
            info,
            atts,
            ts=r["ts"],
            file=f"new/{r['name']}",
            read=bool(r["read"]),
        )
    index.db.execute("DROP TABLE messages_v1")
    return len(rows)
