"""Upgrade an older index in place (ids, folders, dates, read marks and attachments kept).

- v1 (before issue 17): bodies in the row, no full-text index, no thread table. Every
  row is indexed again from what it holds; the file's place is learnt on first use
  (`Mailbox._path_of` looks it up once).
- v2: full-text rowids in arrival order, which a message refiled into `sent` (a new
  date, the old rowid) broke; no kept text. Every row is indexed again, oldest date
  first, so rowid order is date order; its text is read from its Maildir file once
  (`body_of`), or is the row's head when the file is gone.
- v3 and v4: full-text rowids `seq` (newest-first walks descend, which costs FTS5 a
  seek to the end of the posting list in every segment), header values lowercased but
  not in NFC, and (v3) no vocabulary. The full-text table is written again with rowids
  `-seq`, newest first, from the kept text (head and `texts`; a body past TEXT_CAP from
  its file, through `body_of`); the vocabulary (`terms`) is then read once from it (an
  fts5vocab table), so it holds exactly its tokens; `from_lc`/`subject_lc` are folded.
  No message row changes its `seq`, id or read mark. 100k messages: about 30 s, once.

Runs inside the opening index's transaction: an interrupted upgrade leaves the old
index as it was, and the next open starts it again.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from typing import TYPE_CHECKING

from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.records import Attachment

if TYPE_CHECKING:
    from envelopay.mail.mailbox.index import BodyOf, MailIndex

__all__ = ["add_terms", "negate_rowids", "set_aside", "upgrade"]

# What a v2 index had besides `messages` and `dirs` (rebuilt from the rows).
_V2_DERIVED = ("messages_fts", "thread_ids", "threads", "texts")
_OLD_INDEXES = ("messages_folder_ts", "messages_msgid", "messages_thread")


def set_aside(db: sqlite3.Connection, version: int) -> str | None:
    """Rename an older `messages` table out of the way ("v1"/"v2"), or None (fresh or
    current). The caller then creates the current schema and calls `upgrade`."""
    cols = {r[0] for r in db.execute("SELECT name FROM pragma_table_info('messages')")}
    if not cols:
        return None
    if "body" in cols:
        prior = "v1"
    elif version == 2:
        prior = "v2"
        for table in _V2_DERIVED:
            db.execute(f"DROP TABLE IF EXISTS {table}")
    else:
        return None
    db.execute(f"ALTER TABLE messages RENAME TO messages_{prior}")
    for ix in _OLD_INDEXES:
        db.execute(f"DROP INDEX IF EXISTS {ix}")
    return prior


def upgrade(index: MailIndex, prior: str, body_of: BodyOf | None) -> int:
    """Index the set-aside rows again; how many."""
    table = f"messages_{prior}"
    order = "ts, rowid" if prior == "v1" else "ts, seq"
    rows = index.db.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
    for r in rows:
        if prior == "v1":
            body, file = r["body"], f"new/{r['name']}"
        else:
            file = r["file"]
            body = r["body_head"]
            if int(r["body_len"]) > len(body) and body_of is not None:
                body = body_of(r["folder"], r["name"], file) or body
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
            body=body,
            protocol_type=r["protocol_type"],
            status=r["status"],
            problems=json.loads(r["problems"]),
        )
        atts = [Attachment(**a) for a in json.loads(r["attachments"])]
        index.add(r["id"], r["folder"], r["name"], info, atts, ts=r["ts"], file=file, read=bool(r["read"]))
    index.db.execute(f"DROP TABLE {table}")
    return len(rows)


def negate_rowids(index: MailIndex, body_of: BodyOf | None) -> int:
    """Write a v3/v4 index's full-text table again with rowids `-seq` (newest first, so
    rowids ascend: FTS5 fills whole segments) and fold its header columns; how many
    rows. Rows of removed messages, which joined nothing, are not written again."""
    from envelopay.mail.mailbox.index import _SCHEMA

    db = index.db
    db.execute("DROP TABLE messages_fts")
    db.execute(next(s for s in _SCHEMA.split(";") if "messages_fts USING fts5" in s))
    db.execute("DELETE FROM terms")  # read again from the new table (add_terms)
    db.execute("UPDATE messages SET from_lc = fold(from_addr), subject_lc = fold(subject)")
    rows = db.execute(
        "SELECT m.seq, m.folder, m.name, m.file, m.from_addr, m.subject, m.body_head, m.body_len, t.z"
        " FROM messages m LEFT JOIN texts t ON t.seq = m.seq ORDER BY m.seq DESC"
    )
    n = 0
    batch: list[tuple[int, str, str, str]] = []
    for r in rows:
        body = r["body_head"]
        if r["z"] is not None:
            body += zlib.decompress(r["z"]).decode()
        elif int(r["body_len"]) > len(body) and body_of is not None:
            body = body_of(r["folder"], r["name"], r["file"]) or body
        batch.append((-int(r["seq"]), r["from_addr"], r["subject"], body))
        if len(batch) >= 256:
            n += _insert(db, batch)
    return n + _insert(db, batch)


def _insert(db: sqlite3.Connection, rows: list[tuple[int, str, str, str]]) -> int:
    db.executemany("INSERT INTO messages_fts (rowid, from_addr, subject, body) VALUES (?, ?, ?, ?)", rows)
    n = len(rows)
    rows.clear()
    return n


def add_terms(db: sqlite3.Connection) -> int:
    """Fill `terms` from a v3 index's full-text table (every token, in one pass); how many."""
    from envelopay.mail.mailbox.index import TERM_KEEP

    db.execute("CREATE VIRTUAL TABLE temp.v3_terms USING fts5vocab(main, messages_fts, row)")
    cur = db.execute(
        "INSERT OR IGNORE INTO terms (term) SELECT substr(term, 1, ?) FROM temp.v3_terms", (TERM_KEEP,)
    )
    db.execute("DROP TABLE temp.v3_terms")
    return cur.rowcount
