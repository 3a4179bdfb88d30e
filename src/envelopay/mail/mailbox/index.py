"""The mailbox index: one SQLite row per stored message, and the queries actions ask.

Why our own SQLite index and not the ledger: the mailbox is per agent and lives in the
agent's directory; the ledger (flows, replay, outbox of protocol replies) may be a
shared PostgreSQL. The index is derived data except for read state and the send log
(envelopay.mail.mailbox.guard, same database file): a Maildir file it does not know
is indexed again by `Mailbox.refresh()`. A row is tied to its file by the Maildir base
name (UNIQUE), so two processes indexing the same file keep one row.

Every action costs what its result costs (issue 17):
- the Maildir file is the only copy of a body: a row keeps the first `HEAD` characters
  (previews) and the body's words in a contentless FTS5 table (search, `--contains`);
  a longer body is read from its file when a caller wants it whole;
- `from_lc`/`subject_lc` hold the lowercased header values the `check` filters test;
- a thread table joins messages sharing any Message-ID (own, In-Reply-To, References)
  as they are indexed, so `thread` reads one thread, not the mailbox;
- `file` remembers where the file was last seen (new/ or cur/ with its flags);
- `dirs` keeps each folder directory's mtime as of its last listing, so a refresh of an
  unchanged mailbox lists nothing.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.mail.mailbox.fts import words_query
from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.records import Attachment, CheckFilter, MailRecord

__all__ = ["HEAD", "MailIndex"]

HEAD = 1024  # body characters a row keeps (previews are 500 by default)
_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: the FTS rowid
    id TEXT NOT NULL UNIQUE,
    folder TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE,           -- Maildir base name (without :2,flags)
    file TEXT NOT NULL,                  -- new/NAME or cur/NAME:2,FLAGS, as last seen
    message_id TEXT,
    from_addr TEXT NOT NULL,
    from_lc TEXT NOT NULL,
    to_addrs TEXT NOT NULL,
    cc_addrs TEXT NOT NULL,
    subject TEXT NOT NULL,
    subject_lc TEXT NOT NULL,
    ts REAL NOT NULL,
    header_date TEXT,
    in_reply_to TEXT,
    refs TEXT NOT NULL,
    reply_to TEXT,
    body_head TEXT NOT NULL,
    body_len INTEGER NOT NULL,
    attachments TEXT NOT NULL,
    read INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL,
    problems TEXT NOT NULL,
    protocol_type TEXT,
    thread TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_folder_ts ON messages(folder, ts);
CREATE INDEX IF NOT EXISTS messages_msgid ON messages(message_id);
CREATE INDEX IF NOT EXISTS messages_thread ON messages(thread, ts);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    from_addr, subject, body, content='');
CREATE TABLE IF NOT EXISTS thread_ids (message_id TEXT PRIMARY KEY, thread TEXT NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS thread_ids_thread ON thread_ids(thread);
CREATE TABLE IF NOT EXISTS threads (thread TEXT PRIMARY KEY, last_ts REAL NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS threads_recent ON threads(last_ts);
CREATE TABLE IF NOT EXISTS dirs (dir TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL) WITHOUT ROWID;
"""

_COLS = (
    "id, folder, name, file, message_id, from_addr, from_lc, to_addrs, cc_addrs, subject, subject_lc, ts,"
    " header_date, in_reply_to, refs, reply_to, body_head, body_len, attachments, read, status, problems,"
    " protocol_type, thread"
)


def _record(row: sqlite3.Row, truncate: int = 0) -> MailRecord:
    body: str = row["body_head"]
    complete = int(row["body_len"]) <= len(body)
    if truncate == 0 or len(body) <= truncate:
        preview = body if complete or truncate == 0 else body + "…"
    else:
        preview = body[:truncate] + "…"
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
        body_complete=complete,
    )


def _check_query(folder: str, flt: CheckFilter) -> tuple[str, list[Any]]:
    """The SQL of `check`. With a text filter the full-text index drives: its rows come in
    index order (which is arrival order, as `ts` is), the lowercase columns confirm
    `--from`/`--subject` exactly, and the caller confirms `--contains` on the text, so
    the limit is the caller's then. Without one, the (folder, ts) index does."""
    parts = [
        q
        for q in (
            words_query(flt.from_, "from_addr") if flt.from_ else None,
            # A sender is the narrower term; the subject column then confirms exactly.
            words_query(flt.subject, "subject") if flt.subject and not flt.from_ else None,
            words_query(flt.contains, "{subject body}") if flt.contains else None,
        )
        if q
    ]
    direction = "DESC" if flt.sort == "newest" else "ASC"
    if parts:
        sql = [
            "SELECT m.* FROM messages_fts f JOIN messages m ON m.seq = f.rowid"
            " WHERE messages_fts MATCH ? AND m.folder = ?"
        ]
        args: list[Any] = [" ".join(parts), folder]
        order = f"ORDER BY f.rowid {direction}"
    else:
        sql = ["SELECT * FROM messages m WHERE m.folder = ?"]
        args = [folder]
        order = f"ORDER BY m.ts {direction}, m.seq {direction}"
    for col, value in (("from_lc", flt.from_), ("subject_lc", flt.subject)):
        if value:
            sql.append(f"AND instr(m.{col}, ?) > 0")
            args.append(value.lower())
    if flt.after is not None:
        sql.append("AND m.ts > ?")
        args.append(flt.after.timestamp())
    if flt.before is not None:
        sql.append("AND m.ts < ?")
        args.append(flt.before.timestamp())
    if flt.unread_only:
        sql.append("AND m.read = 0")
    if flt.has_attachments is not None:
        sql.append("AND m.attachments " + ("!= '[]'" if flt.has_attachments else "= '[]'"))
    sql.append(order)
    if not flt.contains:
        sql.append("LIMIT ?")
        args.append(flt.n)
    return " ".join(sql), args


class MailIndex:
    """The SQLite index file of one mailbox (WAL; each write is one transaction, or part
    of the caller's `batch()`)."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._depth = 0
        old = self.db.execute("PRAGMA user_version").fetchone()[0]
        has_v1 = self.db.execute("SELECT 1 FROM pragma_table_info('messages') WHERE name = 'body'").fetchone()
        if has_v1:
            self.db.execute("ALTER TABLE messages RENAME TO messages_v1")
            for ix in ("messages_folder_ts", "messages_msgid"):
                self.db.execute(f"DROP INDEX IF EXISTS {ix}")
        self.db.executescript(_SCHEMA)
        if has_v1:
            from envelopay.mail.mailbox.index_upgrade import upgrade_v1

            with self.batch():
                upgrade_v1(self)
        if old != _VERSION:
            self.db.execute(f"PRAGMA user_version = {_VERSION}")

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One write transaction around everything inside (nested: the outer one)."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._depth = 0

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
        file: str,
        read: bool | None = None,
    ) -> bool:
        """Index one file; False when a row for its name exists already (another process)."""
        with self.batch():  # BEGIN IMMEDIATE: the name check below cannot race another process
            if self.db.execute("SELECT 1 FROM messages WHERE name = ?", (name,)).fetchone():
                return False
            links = [m for m in dict.fromkeys([info.message_id, info.in_reply_to, *info.references]) if m]
            thread = self._join_thread(mid, links, ts)
            cur = self.db.execute(
                f"INSERT INTO messages ({_COLS}) VALUES ({','.join('?' * 24)})",
                (
                    mid,
                    folder,
                    name,
                    file,
                    info.message_id,
                    info.from_addr,
                    info.from_addr.lower(),
                    json.dumps(info.to_addrs),
                    json.dumps(info.cc_addrs),
                    info.subject,
                    info.subject.lower(),
                    ts,
                    info.header_date,
                    info.in_reply_to,
                    json.dumps(info.references),
                    info.reply_to,
                    info.body[:HEAD],
                    len(info.body),
                    json.dumps([a.as_dict() for a in attachments]),
                    int(folder != "inbox") if read is None else int(read),  # received mail starts unread
                    info.status,
                    json.dumps(info.problems),
                    info.protocol_type,
                    thread,
                ),
            )
            self.db.execute(
                "INSERT INTO messages_fts (rowid, from_addr, subject, body) VALUES (?, ?, ?, ?)",
                (cur.lastrowid, info.from_addr, info.subject, info.body),
            )
        return True

    def _join_thread(self, mid: str, links: list[str], ts: float) -> str:
        """The thread of a message linked to `links`: the oldest-keyed of the threads they
        touch, which absorbs the others (union of threads sharing a Message-ID)."""
        found: list[str] = []
        if links:
            marks = ",".join("?" * len(links))
            found = sorted(
                {
                    r[0]
                    for r in self.db.execute(
                        f"SELECT thread FROM thread_ids WHERE message_id IN ({marks})", links
                    )
                }
            )
        thread = found[0] if found else f"t:{mid}"
        for other in found[1:]:
            self.db.execute("UPDATE messages SET thread = ? WHERE thread = ?", (thread, other))
            self.db.execute("UPDATE thread_ids SET thread = ? WHERE thread = ?", (thread, other))
            row = self.db.execute(
                "DELETE FROM threads WHERE thread = ? RETURNING last_ts", (other,)
            ).fetchone()
            if row is not None:
                self._touch_thread(thread, float(row[0]))
        self.db.executemany(
            "INSERT INTO thread_ids (message_id, thread) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(m, thread) for m in links],
        )
        self._touch_thread(thread, ts)
        return thread

    def _touch_thread(self, thread: str, ts: float) -> None:
        self.db.execute(
            "INSERT INTO threads (thread, last_ts) VALUES (?, ?)"
            " ON CONFLICT (thread) DO UPDATE SET last_ts = max(last_ts, excluded.last_ts)",
            (thread, ts),
        )

    def mark_read(self, ids: Sequence[str]) -> int:
        """Mark unread messages read; how many changed."""
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        cur = self.db.execute(f"UPDATE messages SET read = 1 WHERE id IN ({marks}) AND read = 0", list(ids))
        return cur.rowcount

    def refile(self, mid: str, folder: str, *, read: bool, file: str, ts: float | None = None) -> None:
        """The message now lives in `folder` at `file` (and entered it at `ts`, when given)."""
        with self.batch():
            self.db.execute(
                "UPDATE messages SET folder = ?, read = ?, file = ?, ts = coalesce(?, ts) WHERE id = ?",
                (folder, int(read), file, ts, mid),
            )
            if ts is not None:
                row = self.db.execute("SELECT thread FROM messages WHERE id = ?", (mid,)).fetchone()
                if row is not None:
                    self._touch_thread(row[0], ts)

    def moved(self, mid: str, file: str) -> None:
        """The file is now at `file` in its folder (a reader moved it or changed its flags)."""
        self.db.execute("UPDATE messages SET file = ? WHERE id = ?", (file, mid))

    def remove(self, mid: str) -> None:
        # The FTS row stays (a contentless table cannot delete without the text): it joins
        # no message any more, and seq is never reused, so it only costs its bytes.
        self.db.execute("DELETE FROM messages WHERE id = ?", (mid,))

    # ------------------------------------------------------------------ refresh state
    def dir_mtime(self, directory: str) -> int | None:
        row = self.db.execute("SELECT mtime_ns FROM dirs WHERE dir = ?", (directory,)).fetchone()
        return None if row is None else int(row[0])

    def set_dir_mtime(self, directory: str, mtime_ns: int) -> None:
        self.db.execute(
            "INSERT INTO dirs (dir, mtime_ns) VALUES (?, ?) ON CONFLICT (dir) DO UPDATE SET mtime_ns = ?",
            (directory, mtime_ns, mtime_ns),
        )

    def files_by_name(self, names: Sequence[str]) -> dict[str, tuple[str, str]]:
        """name → (id, file) for the given names that are indexed."""
        out: dict[str, tuple[str, str]] = {}
        for i in range(0, len(names), 500):
            chunk = list(names[i : i + 500])
            marks = ",".join("?" * len(chunk))
            for r in self.db.execute(f"SELECT name, id, file FROM messages WHERE name IN ({marks})", chunk):
                out[r[0]] = (r[1], r[2])
        return out

    # ------------------------------------------------------------------ reading
    def get(self, mid: str, truncate: int = 0) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (mid,)).fetchone()
        return _record(row, truncate) if row is not None else None

    def by_name(self, name: str) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE name = ?", (name,)).fetchone()
        return _record(row) if row is not None else None

    def location(self, mid: str) -> tuple[str, str, str]:
        """(folder, base name, file as last seen) of an indexed message."""
        row = self.db.execute("SELECT folder, name, file FROM messages WHERE id = ?", (mid,)).fetchone()
        return row[0], row[1], row[2]

    def check(self, folder: str, flt: CheckFilter) -> Iterator[MailRecord]:
        sql, args = _check_query(folder, flt)
        for r in self.db.execute(sql, args):
            yield _record(r, flt.truncate)

    def search(
        self, fts: str | None, folders: Sequence[str], *, truncate: int, rank: bool
    ) -> Iterator[MailRecord]:
        """Candidates in `folders`, best first (rank) or newest first; None: every message."""
        marks = ",".join("?" * len(folders))
        if fts is None:
            sql = f"SELECT * FROM messages WHERE folder IN ({marks}) ORDER BY ts DESC, seq DESC"
            rows = self.db.execute(sql, list(folders))
        elif not rank:  # the FTS walk in rowid (arrival) order streams: no sort
            sql = (
                "SELECT m.* FROM messages_fts f JOIN messages m ON m.seq = f.rowid"
                f" WHERE messages_fts MATCH ? AND m.folder IN ({marks}) ORDER BY f.rowid DESC"
            )
            rows = self.db.execute(sql, [fts, *folders])
        else:
            yield from self._ranked(fts, folders, truncate)
            return
        for r in rows:
            yield _record(r, truncate)

    def _ranked(self, fts: str, folders: Sequence[str], truncate: int) -> Iterator[MailRecord]:
        """Best first: BM25 over the full-text index alone, then the message rows of one
        window of it at a time (not every match's row)."""
        window, offset = 64, 0
        while True:
            ids = [
                r[0]
                for r in self.db.execute(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?"
                    " ORDER BY rank LIMIT ? OFFSET ?",
                    (fts, window, offset),
                )
            ]
            if ids:
                marks = ",".join("?" * len(ids))
                found = {
                    r["seq"]: r
                    for r in self.db.execute(f"SELECT * FROM messages WHERE seq IN ({marks})", ids)
                    if r["folder"] in folders
                }
                for i in ids:
                    if i in found:
                        yield _record(found[i], truncate)
            if len(ids) < window:
                return
            offset += window
            window *= 2

    def thread(self, mid: str, truncate: int) -> list[MailRecord]:
        """Every message of `mid`'s thread, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM messages WHERE thread = (SELECT thread FROM messages WHERE id = ?)"
            " ORDER BY ts, id",
            (mid,),
        ).fetchall()
        return [_record(r, truncate) for r in rows]

    def recent_threads(self) -> Iterator[str]:
        """Thread keys, most recently active first."""
        for r in self.db.execute("SELECT thread FROM threads ORDER BY last_ts DESC"):
            yield r[0]

    def thread_rows(self, thread: str, truncate: int = 0) -> list[MailRecord]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE thread = ? ORDER BY ts, id", (thread,)
        ).fetchall()
        return [_record(r, truncate) for r in rows]
