"""The mailbox index: one SQLite row per stored message, and the queries actions ask.

Why our own SQLite index and not the ledger: the mailbox is per agent and lives in the
agent's directory; the ledger (flows, replay, outbox of protocol replies) may be a
shared PostgreSQL. The index is derived data except for read state and the send log
(envelopay.mail.mailbox.guard, same database file): a Maildir file it does not know
is indexed again by `Mailbox.refresh()`. A row is tied to its file by the Maildir base
name (UNIQUE), so two processes indexing the same file keep one row.

Every action costs what its result costs (issue 17):
- the Maildir file is the only copy of a message: a row keeps the first `HEAD`
  characters (previews), the body's words go to a contentless FTS5 table (search,
  `--contains`), and the rest of a longer body, zlib-compressed, to `texts` (the regex
  and `read` run on head + rest; the file is read only past `TEXT_CAP` characters);
- `ts` never decreases with `seq` (an entry dated before the newest one is dated as it;
  a message refiled into `sent` gets a new `seq`), and the full-text rowid is `-seq`, so
  ascending rowid order is date order, newest first, and every text query stops at its
  limit (envelopay.mail.mailbox.queries). FTS5 writes a transaction's rows in one segment
  only while rowids ascend, so a transaction's texts are inserted at its end, newest first;
- `terms` is the full-text index's vocabulary (every token it ever held, as the FTS5
  tokenizer folds it), so a prefix is expanded into the few whole tokens it covers and
  streams (envelopay.mail.mailbox.fts) instead of merging its posting list;
- `from_lc`/`subject_lc` hold the header values the `check` filters test, lowercased and
  in NFC (`fold`: text typed composed finds text stored decomposed, and the reverse);
- a thread table joins messages sharing any Message-ID (own, In-Reply-To, References)
  as they are indexed, so `thread` reads one thread, not the mailbox;
- `file` remembers where the file was last seen (new/ or cur/ with its flags);
- `dirs` keeps each folder directory's mtime as of its last listing, so a refresh of an
  unchanged mailbox lists nothing.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from envelopay.mail.mailbox import index_upgrade
from envelopay.mail.mailbox.fts import SEPARATE, Expand, fold, starts_a_word, starts_a_word_z, successor
from envelopay.mail.mailbox.index_schema import _VERSION  # noqa: F401  (read as index._VERSION)
from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.queries import COLS, check_query, record
from envelopay.mail.mailbox.records import Attachment, CheckFilter, MailRecord, Progress

__all__ = ["EXPAND_CAP", "HEAD", "RANK_WINDOW", "TEXT_CAP", "BodyOf", "MailIndex"]

HEAD = 1024  # body characters a row keeps (previews are 500 by default)
TEXT_CAP = 200_000  # longer bodies are not kept as search text: their file is read
RANK_WINDOW = 100  # ranked search orders max(this, 5 x limit) newest candidates at a time
EXPAND_CAP = 16  # a prefix covering more tokens than this is queried as a prefix
TERM_KEEP = 200  # characters of a token the vocabulary keeps (a longer one: no expansion)
PENDING_CAP = 256  # texts held for the full-text index before a write (one sorted insert)

# (folder, base name, file as last seen) -> the text body from the Maildir file, or None
BodyOf = Callable[[str, str, str], str | None]


# A scratch full-text table with messages_fts's tokenizer (the default: unicode61,
# diacritics removed) and its vocabulary, per connection: SQLite tokenizes for us.
_SCRATCH = """
CREATE VIRTUAL TABLE IF NOT EXISTS temp.scratch USING fts5(t, content='');
CREATE VIRTUAL TABLE IF NOT EXISTS temp.scratch_tokens USING fts5vocab(temp, scratch, instance);
"""


FtsRow = tuple[int, str, str, str]  # (rowid = -seq, from_addr, subject, body)


class MailIndex:
    """The SQLite index file of one mailbox (WAL; each write is one transaction, or part
    of the caller's `batch()`)."""

    def __init__(self, path: Path, body_of: BodyOf | None = None, progress: Progress | None = None) -> None:
        """Open (or create) the index; an older index is upgraded in place, in committed
        steps (index_upgrade.run: resumable, `progress(done, total)` after each), reading
        message files through `body_of` where the old index did not keep the text."""
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        # Lookups by id land anywhere in a large file: mapped pages cost no read call.
        self.db.execute("PRAGMA mmap_size=268435456")
        self._depth = 0
        self._new_runs: set[bytes] = set()  # the texts of this transaction, split for `terms`
        self._pending: list[FtsRow] = []  # full-text rows of this transaction, not yet written
        self._scratch = False
        self.db.create_function("ws", 2, starts_a_word, deterministic=True)
        self.db.create_function("wsz", 3, starts_a_word_z, deterministic=True)
        self.db.create_function("fold", 1, fold, deterministic=True)
        if not index_upgrade.current(self.db):
            version = self.db.execute("PRAGMA user_version").fetchone()["user_version"]
            try:
                index_upgrade.run(self, version, body_of, progress)
            except BaseException:
                self.db.close()  # interrupted: the committed steps stay, the next open goes on
                raise

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
            self._flush_text()
            self._flush_terms()
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._depth = 0
            self._new_runs.clear()
            self._pending.clear()

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
            ts = max(ts, self._newest_ts())
            links = [m for m in dict.fromkeys([info.message_id, info.in_reply_to, *info.references]) if m]
            thread = self._join_thread(mid, links, ts)
            cur = self.db.execute(
                f"INSERT INTO messages ({COLS}) VALUES ({','.join('?' * 24)})",
                (
                    mid,
                    folder,
                    name,
                    file,
                    info.message_id,
                    info.from_addr,
                    fold(info.from_addr),
                    json.dumps(info.to_addrs),
                    json.dumps(info.cc_addrs),
                    info.subject,
                    fold(info.subject),
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
            assert cur.lastrowid is not None
            self._add_text(cur.lastrowid, info.from_addr, info.subject, info.body)
        return True

    def note_tokens(self, from_addr: str, subject: str, body: str) -> None:
        """This text's tokens go to the vocabulary (`terms`) at the transaction's end."""
        self._new_runs.update(f"{from_addr} {subject} {body}".encode().translate(SEPARATE).split())

    def _add_text(self, seq: int, from_addr: str, subject: str, body: str) -> None:
        self.note_tokens(from_addr, subject, body)
        self._pending.append((-seq, from_addr, subject, body))
        if len(self._pending) >= PENDING_CAP:
            self._flush_text()
        if HEAD < len(body) <= TEXT_CAP:  # the part past the row's head
            self.db.execute(
                "INSERT OR REPLACE INTO texts (seq, z) VALUES (?, ?)",
                (seq, zlib.compress(body[HEAD:].encode(), 6)),
            )

    def _flush_text(self) -> None:
        """Write the pending full-text rows, rowids ascending (newest first): FTS5 starts a
        new segment whenever a rowid is below the previous one, so `seq` order (rowids
        descending) would write one segment per message."""
        self.db.executemany(
            "INSERT INTO messages_fts (rowid, from_addr, subject, body) VALUES (?, ?, ?, ?)",
            sorted(self._pending),
        )
        self._pending.clear()

    def _flush_terms(self) -> None:
        """Add the tokens of the texts indexed in this transaction to `terms` (at its end:
        a batch of messages shares most of its words)."""
        keep = {r[:TERM_KEEP].lower().decode() for r in self._new_runs if r.isascii()}
        other = [r.decode() for r in self._new_runs if not r.isascii()]
        if other:
            keep.update(t[:TERM_KEEP] for t in self._tokens(" ".join(other)))
        self.db.executemany("INSERT OR IGNORE INTO terms (term) VALUES (?)", [(t,) for t in keep])

    def _tokens(self, text: str) -> list[str]:
        """The tokens the full-text index makes of `text`, in order (SQLite's tokenizer)."""
        if not self._scratch:
            for statement in _SCRATCH.split(";"):
                if statement.strip():
                    self.db.execute(statement)
            self._scratch = True
        self.db.execute("INSERT INTO temp.scratch (t) VALUES (?)", (text,))
        tokens = [r["term"] for r in self.db.execute("SELECT term FROM temp.scratch_tokens ORDER BY offset")]
        self.db.execute("INSERT INTO temp.scratch (scratch) VALUES ('delete-all')")
        return tokens

    def expander(self, *, single: bool = False) -> Expand:
        """The whole tokens a prefix word covers, or None (query the prefix): more than
        EXPAND_CAP of them (`single`: more than one, for BM25, which weighs a prefix's
        tokens as one phrase and an OR as several), or a word the tokenizer does not keep
        as one token. The vocabulary holds every token the full-text index ever held (rows
        of removed messages stay in it, joining nothing), so the OR finds what the prefix
        finds."""
        cap = 1 if single else EXPAND_CAP

        def expand(word: str) -> list[str] | None:
            # an ASCII word of letters and digits is its own token, lowercased
            folded = self._tokens(word) if not word.isascii() else [word.lower()] if word.isalnum() else []
            if len(folded) != 1 or len(folded[0]) >= TERM_KEEP:
                return None
            lo, hi = folded[0], successor(folded[0])
            if hi is None:
                return None
            rows = self.db.execute(
                "SELECT term FROM terms WHERE term >= ? AND term < ? ORDER BY term LIMIT ?",
                (lo, hi, cap + 1),
            ).fetchall()
            covered = [str(r["term"]) for r in rows]
            if len(covered) > cap or any(len(t) >= TERM_KEEP for t in covered):
                return None
            other = [t for t in covered if not t.isascii()]
            if other and self._tokens(" ".join(other)) != other:  # a token that would not match itself
                return None
            return covered

        return expand

    def _newest_ts(self) -> float:
        row = self.db.execute("SELECT ts FROM messages ORDER BY seq DESC LIMIT 1").fetchone()
        return float(row["ts"]) if row is not None else float("-inf")

    def _join_thread(self, mid: str, links: list[str], ts: float) -> str:
        """The thread of a message linked to `links`: the oldest-keyed of the threads they
        touch, which absorbs the others (union of threads sharing a Message-ID)."""
        found: list[str] = []
        if links:
            marks = ",".join("?" * len(links))
            found = sorted(
                {
                    r["thread"]
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
                self._touch_thread(thread, float(row["last_ts"]))
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

    def refile(
        self, mid: str, folder: str, *, read: bool, file: str, ts: float | None = None, body: str = ""
    ) -> None:
        """The message now lives in `folder` at `file` (and entered it at `ts`, when given:
        then it takes the next `seq`, so rowid order stays date order; `body` is its text,
        for a body the index does not keep)."""
        with self.batch():
            self.db.execute(
                "UPDATE messages SET folder = ?, read = ?, file = ? WHERE id = ?",
                (folder, int(read), file, mid),
            )
            if ts is not None:
                self._rekey(mid, ts, body)

    def _rekey(self, mid: str, ts: float, body: str) -> None:
        row = self.db.execute(
            "SELECT seq, from_addr, subject, body_head, body_len, thread FROM messages WHERE id = ?", (mid,)
        ).fetchone()
        if row is None:
            return
        ts = max(ts, self._newest_ts())
        top = self.db.execute(
            "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0),"
            " (SELECT max(seq) FROM messages)) AS top"
        ).fetchone()["top"]
        seq = int(top) + 1
        rest = self._stored_rest(int(row["seq"]))
        text = None if rest is None else row["body_head"] + rest
        if text is None:
            text = row["body_head"] if int(row["body_len"]) <= len(row["body_head"]) else body
        # The old full-text row stays, joining nothing (a contentless table cannot delete).
        self.db.execute("DELETE FROM texts WHERE seq = ?", (row["seq"],))
        self.db.execute("UPDATE messages SET seq = ?, ts = ? WHERE id = ?", (seq, ts, mid))
        self.db.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = 'messages'", (seq,))
        self._add_text(seq, row["from_addr"], row["subject"], text)
        self._touch_thread(row["thread"], ts)

    def moved(self, mid: str, file: str) -> None:
        """The file is now at `file` in its folder (a reader moved it or changed its flags)."""
        self.db.execute("UPDATE messages SET file = ? WHERE id = ?", (file, mid))

    def remove(self, mid: str) -> None:
        # The FTS row stays (a contentless table cannot delete without the text): it joins
        # no message any more, and seq is never reused, so it only costs its bytes.
        with self.batch():
            self.db.execute("DELETE FROM texts WHERE seq = (SELECT seq FROM messages WHERE id = ?)", (mid,))
            self.db.execute("DELETE FROM messages WHERE id = ?", (mid,))

    # ------------------------------------------------------------------ refresh state
    def dir_mtime(self, directory: str) -> int | None:
        row = self.db.execute("SELECT mtime_ns FROM dirs WHERE dir = ?", (directory,)).fetchone()
        return None if row is None else int(row["mtime_ns"])

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
                out[r["name"]] = (r["id"], r["file"])
        return out

    # ------------------------------------------------------------------ reading
    def get(self, mid: str, truncate: int = 0) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE id = ?", (mid,)).fetchone()
        return record(row, truncate) if row is not None else None

    def by_name(self, name: str) -> MailRecord | None:
        row = self.db.execute("SELECT * FROM messages WHERE name = ?", (name,)).fetchone()
        return record(row) if row is not None else None

    def text(self, mid: str) -> str | None:
        """The whole text body, when the index keeps it (None: read the file)."""
        row = self.db.execute("SELECT seq, body_head, body_len FROM messages WHERE id = ?", (mid,)).fetchone()
        if row is None:
            return None
        if int(row["body_len"]) <= len(row["body_head"]):
            return str(row["body_head"])
        rest = self._stored_rest(int(row["seq"]))
        return None if rest is None else row["body_head"] + rest

    def _stored_rest(self, seq: int) -> str | None:
        row = self.db.execute("SELECT z FROM texts WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else zlib.decompress(row["z"]).decode()

    def location(self, mid: str) -> tuple[str, str, str]:
        """(folder, base name, file as last seen) of an indexed message."""
        row = self.db.execute("SELECT folder, name, file FROM messages WHERE id = ?", (mid,)).fetchone()
        return row["folder"], row["name"], row["file"]

    def check(self, folder: str, flt: CheckFilter) -> Iterator[tuple[MailRecord, bool]]:
        """Rows in `check` order, each with whether SQL confirmed it (see queries)."""
        sql, args = check_query(folder, flt, self.expander())
        for r in self.db.execute(sql, args):
            yield record(r, flt.truncate), bool(r["exact"])

    def search(
        self, fts: str | None, folders: Sequence[str], *, truncate: int, rank: bool, limit: int = 50
    ) -> Iterator[MailRecord]:
        """Candidates in `folders`, best first (rank) or newest first; None: every message."""
        marks = ",".join("?" * len(folders))
        if fts is None:
            sql = f"SELECT * FROM messages WHERE folder IN ({marks}) ORDER BY ts DESC, seq DESC"
            rows = self.db.execute(sql, list(folders))
        elif not rank:  # the FTS walk in rowid (arrival) order streams: no sort
            sql = (
                "SELECT m.* FROM messages_fts f JOIN messages m ON m.seq = -f.rowid"
                f" WHERE messages_fts MATCH ? AND m.folder IN ({marks}) ORDER BY f.rowid"
            )
            rows = self.db.execute(sql, [fts, *folders])
        else:
            yield from self._ranked(fts, folders, truncate, max(RANK_WINDOW, 5 * limit))
            return
        for r in rows:
            yield record(r, truncate)

    def _ranked(self, fts: str, folders: Sequence[str], truncate: int, window: int) -> Iterator[MailRecord]:
        """Best first by BM25 within each block of `window` full-text candidates (any
        folder), the newest block first: a block costs its own size, not the number of
        matches (BM25's statistics are the whole index's). The message rows are read 32
        at a time, in rank order. Rowids are -seq: the newest block is the lowest rowids."""
        after: int | None = None  # the previous block's last rowid
        while True:
            bound = "" if after is None else " AND rowid > ?"
            args = [fts] if after is None else [fts, after]
            edge = self.db.execute(
                f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{bound}"
                " ORDER BY rowid LIMIT 1 OFFSET ?",
                [*args, window - 1],
            ).fetchone()
            upto = "" if edge is None else " AND rowid <= ?"
            ids = [
                -int(r["rowid"])
                for r in self.db.execute(
                    f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{bound}{upto} ORDER BY rank",
                    [*args, *([] if edge is None else [edge["rowid"]])],
                )
            ]
            for i in range(0, len(ids), 32):
                chunk = ids[i : i + 32]
                marks = ",".join("?" * len(chunk))
                found = {
                    r["seq"]: r
                    for r in self.db.execute(f"SELECT * FROM messages WHERE seq IN ({marks})", chunk)
                    if r["folder"] in folders
                }
                for seq in chunk:
                    if seq in found:
                        yield record(found[seq], truncate)
            if edge is None:
                return
            after = int(edge["rowid"])

    def thread(self, mid: str, truncate: int) -> list[MailRecord]:
        """Every message of `mid`'s thread, oldest first."""
        rows = self.db.execute(
            "SELECT * FROM messages WHERE thread = (SELECT thread FROM messages WHERE id = ?)"
            " ORDER BY ts, id",
            (mid,),
        ).fetchall()
        return [record(r, truncate) for r in rows]

    def recent_threads(self) -> Iterator[str]:
        """Thread keys, most recently active first."""
        for r in self.db.execute("SELECT thread FROM threads ORDER BY last_ts DESC"):
            yield r["thread"]

    def thread_rows(self, thread: str, truncate: int = 0) -> list[MailRecord]:
        rows = self.db.execute(
            "SELECT * FROM messages WHERE thread = ? ORDER BY ts, id", (thread,)
        ).fetchall()
        return [record(r, truncate) for r in rows]

