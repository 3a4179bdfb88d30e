"""The mailbox index: one SQLite row per stored message, and the queries actions ask.

Why our own SQLite index and not the ledger: the mailbox is per agent and lives in the
agent's directory; the ledger (flows, replay, outbox of protocol replies) may be a
shared PostgreSQL. The index is derived data except for read state and the send log
(envelopay.mail.mailbox.guard, same database file): a Maildir file it does not know
is indexed again by `Mailbox.refresh()`. A row is tied to its file by the Maildir base
name (UNIQUE), so two processes indexing the same file keep one row.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.records import Attachment, CheckFilter, MailRecord
from envelopay.mail.mailbox.threads import ThreadLink

__all__ = ["MailIndex"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id TEXT PRIMARY KEY,
    folder TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE,           -- Maildir base name (without :2,flags)
    message_id TEXT,
    from_addr TEXT NOT NULL,
    to_addrs TEXT NOT NULL,
    cc_addrs TEXT NOT NULL,
    subject TEXT NOT NULL,
    ts REAL NOT NULL,
    header_date TEXT,
    in_reply_to TEXT,
    refs TEXT NOT NULL,
    reply_to TEXT,
    body TEXT NOT NULL,
    attachments TEXT NOT NULL,
    read INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    problems TEXT NOT NULL,
    protocol_type TEXT
);
CREATE INDEX IF NOT EXISTS messages_folder_ts ON messages(folder, ts);
CREATE INDEX IF NOT EXISTS messages_msgid ON messages(message_id);
"""


def _lower(value: str | None) -> str | None:
    return value.lower() if isinstance(value, str) else value


def _record(row: sqlite3.Row, truncate: int = 0) -> MailRecord:
    body: str = row["body"]
    preview = body if truncate == 0 or len(body) <= truncate else body[:truncate] + "…"
    return MailRecord(
        id=row["id"],
        folder=row["folder"],
        message_id=row["message_id"],
        from_addr=row["from_addr"],
        to_addrs=tuple(json.loads(row["to_addrs"])),
        cc_addrs=tuple(json.loads(row["cc_addrs"])),
        subject=row["subject"],
        date=datetime.fromtimestamp(row["ts"], UTC),
        header_date=row["header_date"],
        in_reply_to=row["in_reply_to"],
        references=tuple(json.loads(row["refs"])),
        reply_to=row["reply_to"],
        body=body,
        attachments=tuple(Attachment(**a) for a in json.loads(row["attachments"])),
        read=bool(row["read"]),
        status=row["status"],
        problems=tuple(json.loads(row["problems"])),
        protocol_type=row["protocol_type"],
        preview=preview,
    )


def _check_query(folder: str, flt: CheckFilter) -> tuple[str, list[Any]]:
    """The SQL of `check`: the filter's selectors, its order and its limit."""
    sql = ["SELECT * FROM messages WHERE folder = ?"]
    args: list[Any] = [folder]
    for col, value in (("from_addr", flt.from_), ("subject", flt.subject)):
        if value:
            sql.append(f"AND instr(pylower({col}), ?) > 0")
            args.append(value.lower())
    if flt.contains:
        sql.append("AND (instr(pylower(body), ?) > 0 OR instr(pylower(subject), ?) > 0)")
        args += [flt.contains.lower(), flt.contains.lower()]
    if flt.after is not None:
        sql.append("AND ts > ?")
        args.append(flt.after.timestamp())
    if flt.before is not None:
        sql.append("AND ts < ?")
        args.append(flt.before.timestamp())
    if flt.unread_only:
        sql.append("AND read = 0")
    if flt.has_attachments is not None:
        sql.append("AND attachments " + ("!= '[]'" if flt.has_attachments else "= '[]'"))
    direction = "DESC" if flt.sort == "newest" else "ASC"
    sql.append(f"ORDER BY ts {direction}, rowid {direction}")
    sql.append("LIMIT ?")
    args.append(flt.n)
    return " ".join(sql), args


class MailIndex:
    """The SQLite index file of one mailbox (autocommit, WAL)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        # SQLite's lower() folds ASCII only; filters are case-insensitive for any script.
        self.db.create_function("pylower", 1, _lower, deterministic=True)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ writing
    def add(
        self,
        mid: str,
        folder: str,
        name: str,
        info: Interpretation,
        attachments: Sequence[Attachment],
        *,
        ts: float,
    ) -> bool:
        """Index one file; False when a row for its name exists already (another process)."""
        cur = self.db.execute(
            "INSERT INTO messages (id, folder, name, message_id, from_addr, to_addrs, cc_addrs, subject, ts,"
            " header_date, in_reply_to, refs, reply_to, body, attachments, read, status, problems,"
            " protocol_type) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(name) DO NOTHING",
            (
                mid,
                folder,
                name,
                info.message_id,
                info.from_addr,
                json.dumps(info.to_addrs),
                json.dumps(info.cc_addrs),
                info.subject,
                ts,
                info.header_date,
                info.in_reply_to,
                json.dumps(info.references),
                info.reply_to,
                info.body,
                json.dumps([a.as_dict() for a in attachments]),
                1 if folder != "inbox" else 0,  # only received mail starts unread
                info.status,
                json.dumps(info.problems),
                info.protocol_type,
            ),
        )
        return cur.rowcount > 0

    def mark_read(self, ids: Sequence[str]) -> int:
        """Mark unread messages read; how many changed."""
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        cur = self.db.execute(f"UPDATE messages SET read = 1 WHERE id IN ({marks}) AND read = 0", list(ids))
        return cur.rowcount

    def refile(self, mid: str, folder: str, *, read: bool, ts: float | None = None) -> None:
        """The message now lives in `folder` (and entered it at `ts`, when given)."""
        if ts is None:
            self.db.execute("UPDATE messages SET folder = ?, read = ? WHERE id = ?", (folder, int(read), mid))
        else:
            self.db.execute(
                "UPDATE messages SET folder = ?, read = ?, ts = ? WHERE id = ?", (folder, int(read), ts, mid)
            )

    def remove(self, mid: str) -> None:
        self.db.execute("DELETE FROM messages WHERE id = ?", (mid,))

    # ------------------------------------------------------------------ reading
    def names(self) -> set[str]:
        return {row["name"] for row in self.db.execute("SELECT name FROM messages")}

    def get(self, mid: str, truncate: int = 0) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (mid,)).fetchone()
        return _record(row, truncate) if row is not None else None

    def by_name(self, name: str) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE name = ?", (name,)).fetchone()
        return _record(row) if row is not None else None

    def name_of(self, mid: str) -> str:
        row = self.db.execute("SELECT name FROM messages WHERE id = ?", (mid,)).fetchone()
        name: str = row["name"]
        return name

    def check(self, folder: str, flt: CheckFilter) -> list[MailRecord]:
        sql, args = _check_query(folder, flt)
        return [_record(r, flt.truncate) for r in self.db.execute(sql, args).fetchall()]

    def search(self, pattern: re.Pattern[str], folders: Sequence[str], *, truncate: int) -> list[MailRecord]:
        """Messages in `folders` whose sender, subject or body the pattern matches, newest first."""
        marks = ",".join("?" * len(folders))
        rows = self.db.execute(
            f"SELECT * FROM messages WHERE folder IN ({marks}) ORDER BY ts DESC, rowid DESC", list(folders)
        ).fetchall()
        return [
            _record(r, truncate)
            for r in rows
            if pattern.search(r["from_addr"]) or pattern.search(r["subject"]) or pattern.search(r["body"])
        ]

    def thread_links(self) -> list[ThreadLink]:
        rows = self.db.execute("SELECT id, message_id, in_reply_to, refs FROM messages").fetchall()
        return [ThreadLink(r["id"], r["message_id"], r["in_reply_to"], json.loads(r["refs"])) for r in rows]
