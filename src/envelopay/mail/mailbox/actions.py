"""The agent mailbox: Maildir folders with a small SQLite index, and the actions agents use.

Layout under the agent's directory (seed agent-mailbox-actions-and-storage, adapted to
Maildir so the garden and IMAP ingestion write the same format)::

    mailbox/inbox/   {tmp,new,cur}   received mail (exact bytes as received)
    mailbox/sent/    {tmp,new,cur}   one record per successful send
    mailbox/archive/ {tmp,new,cur}   archived inbox mail
    mailbox/outbox/  {tmp,new,cur}   composed, not (yet) accepted by the send function
    mailbox/attachments/<id>/        received attachments, extracted for the agent
    mailbox/index.sqlite3            metadata: folder, headers, preview, read state, sends
    mailbox/contacts.json            private contact book (atomic replacement)

Why our own SQLite index and not the ledger: the mailbox is per agent and lives in the
agent's directory; the ledger (flows, replay, outbox of protocol replies) may be a
shared PostgreSQL. The index is derived data except for read state and the send log:
`refresh()` rebuilds entries for any Maildir file it does not know.

Every raw message is stored before it is interpreted. A message whose MIME or headers
cannot be understood is still indexed, with `status = "malformed"` and the parser's
problems recorded; nothing received is dropped.

Bad input is refused before any I/O with `MailboxError` (a `UsageError` carrying a
stable `code` and the `field` at fault): several addresses or CR/LF in a single-address
field, an invalid regex, a body over 50,000 characters, an attachment outside the
agent's directory (symlinks resolved), a duplicate send, deleting sent mail.
"""

from __future__ import annotations

import email
import hashlib
import json
import mimetypes
import os
import re
import secrets
import shutil
import sqlite3
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email import policy
from email.message import EmailMessage, Message
from email.utils import format_datetime, getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from envelopay.errors import UsageError
from envelopay.mail.addresses import AddressProblem, parse_address
from envelopay.mail.contacts import ContactBook
from envelopay.mail.maildir import deliver_file, ensure_maildir
from envelopay.protocol.compose import new_message_id

if TYPE_CHECKING:  # imap imports aioimaplib lazily; the mailbox works without it
    from envelopay.mail.imap import ImapMessage, Processed

__all__ = [
    "FOLDERS",
    "MAX_BODY_CHARS",
    "CheckFilter",
    "MailRecord",
    "Mailbox",
    "MailboxError",
    "OutgoingMail",
    "SendFn",
    "SendResult",
    "smtp_send_fn",
]

Folder = Literal["inbox", "sent", "archive", "outbox"]
FOLDERS: tuple[Folder, ...] = ("inbox", "sent", "archive", "outbox")
MALFORMED_FLAG = "$EnvelopayMalformed"
MAX_BODY_CHARS = 50_000  # seed: "capped at 50,000 Unicode characters and is rejected, not truncated"
_MSGID_RE = re.compile(r"<[^<>\s]{1,250}@[^<>\s]{1,250}>")
_ID_RE = re.compile(r"[0-9a-f]{12}")
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]")


class MailboxError(UsageError):
    """A refused mailbox action: `code` is stable, `field` names the input at fault."""

    def __init__(self, code: str, detail: str, field: str | None = None) -> None:
        super().__init__(f"{field}: {detail}" if field else detail)
        self.code = code
        self.detail = detail
        self.field = field

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.code, "field": self.field, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Attachment:
    filename: str
    content_type: str
    size: int
    path: str | None = None  # where the extracted copy lives (received mail)


@dataclass(frozen=True, slots=True)
class MailRecord:
    """One indexed message. `body` is the text body; `preview` its possibly truncated form."""

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

    def as_dict(self, *, with_body: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "folder": self.folder,
            "message_id": self.message_id,
            "from": self.from_addr,
            "to": list(self.to_addrs),
            "cc": list(self.cc_addrs),
            "subject": self.subject,
            "date": self.date.isoformat(),
            "in_reply_to": self.in_reply_to,
            "references": list(self.references),
            "read": self.read,
            "status": self.status,
            "problems": list(self.problems),
            "protocol_type": self.protocol_type,
            "attachments": [
                {"filename": a.filename, "content_type": a.content_type, "size": a.size, "path": a.path}
                for a in self.attachments
            ],
        }
        if with_body:
            out["body"] = self.body
        else:
            out["preview"] = self.preview
        return out


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
        if self.n < 1:
            raise MailboxError("invalid_filter", "must be at least 1", "n")
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
CREATE TABLE IF NOT EXISTS sends (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    recipient TEXT NOT NULL,
    body_hash TEXT NOT NULL,
    ts REAL NOT NULL,
    status TEXT NOT NULL,
    message_id TEXT
);
CREATE INDEX IF NOT EXISTS sends_guard ON sends(recipient, body_hash, status, ts);
"""


def _now() -> datetime:
    return datetime.now(UTC)


def _new_id() -> str:
    return secrets.token_hex(6)


class Mailbox:
    """One agent's mailbox rooted at `agent_dir`.

    address   -- the agent's own bare address (From of what it sends; excluded from reply-all)
    inbox     -- the Maildir that receives this agent's mail (default mailbox/inbox); point it
                 at the garden's `<root>/<address>/` to read garden deliveries in place. The
                 engine's pickup moves files new/ → cur/ there; the index follows a file by
                 its base name, so both may work on the same directory.
    now, new_id -- injected clock and id source
    duplicate_window -- a successful send of the same body to the same recipient within
                  this window refuses the next one (the loop guard); None disables it
    """

    def __init__(
        self,
        agent_dir: Path,
        *,
        address: str | None = None,
        now: Callable[[], datetime] = _now,
        new_id: Callable[[], str] = _new_id,
        duplicate_window: timedelta | None = timedelta(hours=1),
        inbox: Path | None = None,
    ) -> None:
        self.agent_dir = Path(agent_dir).resolve()
        self.root = self.agent_dir / "mailbox"
        # The inbox may be another Maildir, e.g. the garden's <root>/<address>/ for this agent.
        self._inbox = Path(inbox).resolve() if inbox is not None else self.root / "inbox"
        self.address = _single("address", address).lower() if address is not None else None
        self._now = now
        self._new_id = new_id
        self.duplicate_window = duplicate_window
        for folder in FOLDERS:
            ensure_maildir(self.folder_path(folder))
        self.contacts = ContactBook(self.root / "contacts.json")
        self._db = sqlite3.connect(self.root / "index.sqlite3", isolation_level=None)
        self._db.row_factory = sqlite3.Row
        # SQLite's lower() folds ASCII only; filters are case-insensitive for any script.
        self._db.create_function("pylower", 1, _lower, deterministic=True)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ storing
    def folder_path(self, folder: str) -> Path:
        if _folder(folder) == "inbox":
            return self._inbox
        return self.root / folder

    def deliver(self, raw: bytes, folder: Folder = "inbox") -> MailRecord:
        """Store raw bytes (atomic Maildir write) and index them; never refuses content."""
        path = deliver_file(self.folder_path(folder), bytes(raw))
        return self._index_file(folder, path)

    async def imap_consumer(self, msg: ImapMessage) -> bool | Processed:
        """An `ImapSource` consumer: store the exact bytes in the inbox. Mail that could not
        be understood is kept all the same and also flagged $EnvelopayMalformed on the server."""
        from envelopay.mail.imap import Processed

        rec = self.deliver(bytes(msg.raw), "inbox")
        return Processed(frozenset({MALFORMED_FLAG})) if rec.status == "malformed" else True

    def refresh(self) -> list[MailRecord]:
        """Index Maildir files that arrived by other means (garden delivery, restores)."""
        known = {row["name"] for row in self._db.execute("SELECT name FROM messages")}
        added: list[MailRecord] = []
        for folder in FOLDERS:
            base = self.folder_path(folder)
            for sub in ("new", "cur"):
                for entry in sorted(os.listdir(base / sub)):
                    if entry.startswith("."):
                        continue
                    if entry.split(":", 1)[0] not in known:
                        added.append(self._index_file(folder, base / sub / entry))
        return added

    def _index_file(self, folder: str, path: Path) -> MailRecord:
        name = path.name.split(":", 1)[0]
        known = self._by_name(name)
        if known is not None:
            return known
        raw = path.read_bytes()
        mid = self._new_id()
        info = _interpret(raw)
        # Received attachments are extracted for the agent; our own copies are only listed.
        if folder == "inbox":
            atts = self._extract_attachments(mid, info["attachment_parts"])
        else:
            atts = list(info["attachment_meta"])
        cur = self._db.execute(
            "INSERT INTO messages (id, folder, name, message_id, from_addr, to_addrs, cc_addrs, subject, ts,"
            " header_date, in_reply_to, refs, reply_to, body, attachments, read, status, problems,"
            " protocol_type) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(name) DO NOTHING",
            (
                mid,
                folder,
                name,
                info["message_id"],
                info["from_addr"],
                json.dumps(info["to_addrs"]),
                json.dumps(info["cc_addrs"]),
                info["subject"],
                self._now().timestamp(),
                info["header_date"],
                info["in_reply_to"],
                json.dumps(info["references"]),
                info["reply_to"],
                info["body"],
                json.dumps([_att(a) for a in atts]),
                1 if folder != "inbox" else 0,
                info["status"],
                json.dumps(info["problems"]),
                info["protocol_type"],
            ),
        )
        if cur.rowcount == 0:
            # Another process (a concurrent refresh) indexed this file first: keep its record.
            shutil.rmtree(self.root / "attachments" / mid, ignore_errors=True)
            existing = self._by_name(name)
            assert existing is not None
            return existing
        return self._get(mid)

    def _by_name(self, name: str) -> MailRecord | None:
        row = self._db.execute("SELECT * FROM messages WHERE name = ?", (name,)).fetchone()
        return self._row(row) if row is not None else None

    def _extract_attachments(self, mid: str, parts: list[tuple[str, str, bytes]]) -> list[Attachment]:
        out: list[Attachment] = []
        if not parts:
            return out
        target = self.root / "attachments" / mid
        target.mkdir(parents=True, exist_ok=True)
        used: set[str] = set()
        for filename, ctype, data in parts:
            safe = _safe_filename(filename)
            stem, dot, ext = safe.rpartition(".")
            candidate, k = safe, 1
            while candidate in used:  # duplicate basenames get a suffix
                k += 1
                candidate = f"{stem}-{k}.{ext}" if dot else f"{safe}-{k}"
            used.add(candidate)
            (target / candidate).write_bytes(data)
            out.append(
                Attachment(filename, ctype, len(data), str((target / candidate).relative_to(self.agent_dir)))
            )
        return out

    # ------------------------------------------------------------------ reading
    def _row(self, row: sqlite3.Row, truncate: int = 0) -> MailRecord:
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

    def _get(self, mid: str, truncate: int = 0) -> MailRecord:
        row = self._db.execute("SELECT * FROM messages WHERE id = ?", (mid,)).fetchone()
        if row is None:
            raise MailboxError(
                "not_found", f"no message {mid!r} in this mailbox (ids come from check/search)", "id"
            )
        return self._row(row, truncate)

    def get(self, mid: str) -> MailRecord:
        return self._get(_id(mid))

    def raw(self, mid: str) -> bytes:
        """The exact stored bytes of a message."""
        return self._path_of(self._get(_id(mid))).read_bytes()

    def _path_of(self, rec: MailRecord) -> Path:
        row = self._db.execute("SELECT name FROM messages WHERE id = ?", (rec.id,)).fetchone()
        base = self.folder_path(rec.folder)
        name: str = row["name"]
        for sub in ("cur", "new"):
            direct = base / sub / name
            if direct.exists():
                return direct
            for entry in os.listdir(base / sub):
                if entry.split(":", 1)[0] == name:
                    return base / sub / entry
        raise MailboxError("not_found", f"message file for {rec.id} is missing from {rec.folder}", "id")

    def check(self, folder: str = "inbox", flt: CheckFilter | None = None) -> list[MailRecord]:
        """List a folder, newest first by default, with the seed's filters."""
        flt = flt or CheckFilter()
        folder = _folder(folder)
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
        sql.append(
            "ORDER BY ts "
            + ("DESC" if flt.sort == "newest" else "ASC")
            + ", rowid "
            + ("DESC" if flt.sort == "newest" else "ASC")
        )
        sql.append("LIMIT ?")
        args.append(flt.n)
        rows = self._db.execute(" ".join(sql), args).fetchall()
        return [self._row(r, flt.truncate) for r in rows]

    def search(self, query: str, folder: str | None = None, *, truncate: int = 500) -> list[MailRecord]:
        """Regex over sender, subject and body; without a folder: inbox and sent."""
        try:
            pattern = re.compile(query, re.IGNORECASE)
        except re.error as exc:
            raise MailboxError("invalid_regex", f"not a valid regular expression: {exc}", "query") from exc
        folders = (_folder(folder),) if folder is not None else ("inbox", "sent")
        marks = ",".join("?" * len(folders))
        rows = self._db.execute(
            f"SELECT * FROM messages WHERE folder IN ({marks}) ORDER BY ts DESC, rowid DESC", folders
        ).fetchall()
        return [
            self._row(r, truncate)
            for r in rows
            if pattern.search(r["from_addr"]) or pattern.search(r["subject"]) or pattern.search(r["body"])
        ]

    def read(self, ids: Sequence[str]) -> list[MailRecord]:
        """Full records; inbox messages among them become read."""
        recs = [self._get(_id(i)) for i in ids]
        self._set_read([r.id for r in recs if r.folder == "inbox"])
        return [self._get(r.id) for r in recs]

    def dismiss(self, ids: Sequence[str]) -> int:
        """Mark inbox messages read without returning them."""
        recs = [self._get(_id(i)) for i in ids]
        return self._set_read([r.id for r in recs if r.folder == "inbox"])

    def _set_read(self, ids: list[str]) -> int:
        if not ids:
            return 0
        marks = ",".join("?" * len(ids))
        cur = self._db.execute(f"UPDATE messages SET read = 1 WHERE id IN ({marks}) AND read = 0", ids)
        return cur.rowcount

    def archive(self, ids: Sequence[str]) -> list[MailRecord]:
        """Move inbox messages to archive (the file is renamed; the read mark is dropped)."""
        recs = [self._get(_id(i)) for i in ids]
        for r in recs:
            if r.folder != "inbox":
                raise MailboxError(
                    "wrong_folder", f"{r.id} is in {r.folder}; only inbox mail is archived", "id"
                )
        for r in recs:
            src = self._path_of(r)
            dst = (
                self.folder_path("archive") / "cur" / src.name
                if ":" in src.name
                else (self.folder_path("archive") / "cur" / f"{src.name}:2,")
            )
            os.rename(src, dst)
            self._db.execute("UPDATE messages SET folder = 'archive', read = 0 WHERE id = ?", (r.id,))
        return [self._get(r.id) for r in recs]

    def delete(self, ids: Sequence[str]) -> int:
        """Remove inbox/archive messages for good; sent (and outbox) mail is refused."""
        recs = [self._get(_id(i)) for i in ids]
        for r in recs:
            if r.folder not in ("inbox", "archive"):
                raise MailboxError(
                    "refused", f"{r.id} is in {r.folder}; only inbox and archive mail is deleted", "id"
                )
        for r in recs:
            path = self._path_of(r)
            path.unlink()
            self._db.execute("DELETE FROM messages WHERE id = ?", (r.id,))
            att = self.root / "attachments" / r.id
            if att.is_dir():
                for f in att.iterdir():
                    f.unlink()
                att.rmdir()
        return len(recs)

    # ------------------------------------------------------------------ threads
    def thread(self, mid: str, *, truncate: int = 500) -> list[MailRecord]:
        """Every message (all folders) in the same References thread, oldest first."""
        rec = self._get(_id(mid))
        groups = self._thread_groups()
        key = groups.get(rec.id, rec.id)
        ids = [i for i, root in groups.items() if root == key]
        recs = [self._get(i, truncate) for i in ids]
        return sorted(recs, key=lambda r: (r.date, r.id))

    def threads(self, folder: str | None = None) -> list[list[MailRecord]]:
        """All threads (each oldest first), most recently active first."""
        groups = self._thread_groups()
        by_root: dict[str, list[MailRecord]] = {}
        for i, root in groups.items():
            by_root.setdefault(root, []).append(self._get(i))
        out = [sorted(v, key=lambda r: (r.date, r.id)) for v in by_root.values()]
        if folder is not None:
            f = _folder(folder)
            out = [t for t in out if any(r.folder == f for r in t)]
        return sorted(out, key=lambda t: t[-1].date, reverse=True)

    def _thread_groups(self) -> dict[str, str]:
        """Message id → thread key, joining messages that share any Message-ID in their
        References / In-Reply-To / own Message-ID (union-find over Message-IDs)."""
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        rows = self._db.execute("SELECT id, message_id, in_reply_to, refs FROM messages").fetchall()
        for row in rows:
            node = f"id:{row['id']}"
            find(node)
            linked = [*json.loads(row["refs"])]
            if row["in_reply_to"]:
                linked.append(row["in_reply_to"])
            if row["message_id"]:
                linked.append(row["message_id"])
            for m in linked:
                union(node, f"mid:{m}")
        return {row["id"]: find(f"id:{row['id']}") for row in rows}

    # ------------------------------------------------------------------ sending
    def compose(
        self,
        to: str,
        subject: str,
        body: str,
        *,
        cc: Iterable[str] = (),
        attachments: Iterable[str | Path] = (),
        in_reply_to: str | None = None,
        references: Sequence[str] = (),
    ) -> tuple[bytes, OutgoingMail]:
        """Validate and build a plain (non-protocol) message. Refuses before any I/O."""
        sender = self._require_self()
        rcpt = _single("to", to).lower()
        ccs = tuple(_single("cc", c).lower() for c in cc)
        subject = _header_text("subject", subject)
        _check_body(body)
        files = [self._attachment_source(p) for p in attachments]
        if in_reply_to is not None and not _MSGID_RE.fullmatch(_header_text("in_reply_to", in_reply_to)):
            raise MailboxError("invalid_field", "not a Message-ID like <id@domain>", "in_reply_to")
        for r in references:
            if not _MSGID_RE.fullmatch(_header_text("references", r)):
                raise MailboxError("invalid_field", "not a Message-ID like <id@domain>", "references")
        msg = EmailMessage(policy=policy.SMTP)
        msg["From"] = sender
        msg["To"] = rcpt
        if ccs:
            msg["Cc"] = ", ".join(ccs)
        msg["Subject"] = subject
        msg["Date"] = format_datetime(self._now())
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

    async def send(
        self,
        send_fn: SendFn,
        to: str,
        subject: str,
        body: str,
        *,
        cc: Iterable[str] = (),
        attachments: Iterable[str | Path] = (),
        in_reply_to: str | None = None,
        references: Sequence[str] = (),
    ) -> SendResult:
        """Compose, guard, record in outbox, hand to `send_fn`, then file the result."""
        _raw, out = self.compose(
            to, subject, body, cc=cc, attachments=attachments, in_reply_to=in_reply_to, references=references
        )
        self._guard_duplicate(out.recipients[0], body)
        return await self._dispatch(send_fn, out, body)

    async def send_raw(self, send_fn: SendFn, out: OutgoingMail, body_for_guard: str) -> SendResult:
        """Send already composed bytes (protocol mail from `envelopay.protocol.compose`)."""
        for r in out.recipients:
            _single("to", r)
        self._guard_duplicate(out.recipients[0], body_for_guard)
        return await self._dispatch(send_fn, out, body_for_guard)

    async def _dispatch(self, send_fn: SendFn, out: OutgoingMail, body: str) -> SendResult:
        queued = self.deliver(out.raw, "outbox")
        try:
            result = await send_fn(out)
        except Exception as exc:
            # A broken transport is a failed send: it must not count for the guard.
            result = SendResult("failed", f"{type(exc).__name__}: {exc}")
        body_hash = _body_hash(body)
        for r in out.recipients:
            self._db.execute(
                "INSERT INTO sends (recipient, body_hash, ts, status, message_id) VALUES (?,?,?,?,?)",
                (r, body_hash, self._now().timestamp(), result.status, out.message_id),
            )
        if result.status == "sent":
            src = self._path_of(queued)
            os.rename(src, self.folder_path("sent") / "cur" / (src.name.split(":", 1)[0] + ":2,S"))
            self._db.execute(
                "UPDATE messages SET folder = 'sent', read = 1, ts = ? WHERE id = ?",
                (self._now().timestamp(), queued.id),
            )
        elif result.status in ("blocked", "failed"):
            # Not sent and never will be from here: drop the outbox copy, keep the log row.
            self._path_of(queued).unlink()
            self._db.execute("DELETE FROM messages WHERE id = ?", (queued.id,))
            return SendResult(result.status, result.detail, None, out.message_id)
        return SendResult(result.status, result.detail, queued.id, out.message_id)

    def _guard_duplicate(self, recipient: str, body: str) -> None:
        if self.duplicate_window is None:
            return
        since = (self._now() - self.duplicate_window).timestamp()
        row = self._db.execute(
            "SELECT count(*) FROM sends"
            " WHERE recipient = ? AND body_hash = ? AND status = 'sent' AND ts >= ?",
            (recipient.lower(), _body_hash(body), since),
        ).fetchone()
        if row[0] > 0:
            raise MailboxError(
                "duplicate_send",
                f"the same body was already sent to {recipient} within "
                f"{self.duplicate_window}; change the message or wait",
                "message",
            )

    async def reply(
        self,
        send_fn: SendFn,
        mid: str,
        body: str,
        *,
        reply_all: bool = False,
        attachments: Iterable[str | Path] = (),
    ) -> SendResult:
        """Reply in plain text with threading headers; `Re:` added once to the subject."""
        parent = self._get(_id(mid))
        to, cc = self.reply_recipients(parent, reply_all=reply_all)
        in_reply_to, refs = _thread_headers(parent)
        subject = parent.subject
        if not re.match(r"(?i)re\s*:", subject):
            subject = f"Re: {subject}"
        return await self.send(
            send_fn,
            to,
            subject,
            body,
            cc=cc,
            attachments=attachments,
            in_reply_to=in_reply_to,
            references=refs,
        )

    async def reply_protocol(
        self, send_fn: SendFn, mid: str, message: Any, *, domain: str | None = None
    ) -> SendResult:
        """Reply with an Envelopay message: composed by envelopay.protocol (subject `TYPE | note`,
        never `Re:`), threaded to the parent."""
        from envelopay.protocol.compose import compose_message, message_json

        parent = self._get(_id(mid))
        sender = self._require_self()
        to, _ = self.reply_recipients(parent, reply_all=False)
        in_reply_to, refs = _thread_headers(parent)
        raw, message_id = compose_message(
            message,
            sender=sender,
            recipient=to,
            domain=domain or sender.rpartition("@")[2],
            now=self._now(),
            in_reply_to=in_reply_to,
            references=refs,
        )
        return await self.send_raw(
            send_fn, OutgoingMail(sender, (to,), raw, message_id), message_json(message)
        )

    def reply_recipients(self, parent: MailRecord, *, reply_all: bool) -> tuple[str, list[str]]:
        """(to, cc) for a reply: Reply-To or From; reply-all adds To and Cc minus ourselves."""
        me = self._require_self()
        to = parent.reply_to or parent.from_addr
        if parent.folder == "sent" and parent.to_addrs:
            to = parent.to_addrs[0]  # replying to our own sent mail continues with its recipient
        to = _single("to", to).lower()
        cc: list[str] = []
        if reply_all:
            for a in (*parent.to_addrs, *parent.cc_addrs):
                a = a.lower()
                if a not in (me, to) and a not in cc:
                    cc.append(a)
        return to, cc

    def _require_self(self) -> str:
        if self.address is None:
            raise MailboxError("missing_address", "the mailbox has no own address configured", "address")
        return self.address

    def _attachment_source(self, p: str | Path) -> Path:
        """An attachment path must resolve (symlinks followed) inside the agent's directory."""
        given = Path(p)
        if not given.is_absolute():
            given = self.agent_dir / given
        resolved = given.resolve()
        if not resolved.is_relative_to(self.agent_dir):
            raise MailboxError(
                "attachment_outside", f"{p} is outside the agent directory {self.agent_dir}", "attachments"
            )
        if not resolved.is_file():
            raise MailboxError("attachment_missing", f"{p} is not a readable file", "attachments")
        return resolved


# ---------------------------------------------------------------------- helpers (pure)
def _folder(folder: str) -> Folder:
    if folder not in FOLDERS:
        raise MailboxError("invalid_folder", f"{folder!r} is not one of {', '.join(FOLDERS)}", "folder")
    return folder


def _id(mid: str) -> str:
    if not isinstance(mid, str) or not _ID_RE.fullmatch(mid):
        raise MailboxError(
            "not_found", f"{mid!r} is not a mailbox id (12 hex digits from check/search)", "id"
        )
    return mid


def _single(field: str, value: str | None) -> str:
    """Exactly one bare address (display name tolerated) or MailboxError naming the field."""
    if value is None:
        raise MailboxError("invalid_address", "an address is required", field)
    parsed = parse_address(value, allow_display_name=True)
    if isinstance(parsed, AddressProblem):
        raise MailboxError("invalid_address", f"{parsed.reason}: {parsed.detail}", field)
    return parsed.addr


def _header_text(field: str, value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise MailboxError("header_injection", "CR, LF or NUL is not allowed", field)
    if len(value) > 900:
        raise MailboxError("invalid_field", "longer than 900 characters", field)
    return value


def _check_body(body: str) -> None:
    if len(body) > MAX_BODY_CHARS:
        raise MailboxError(
            "body_too_long",
            f"{len(body)} characters; the limit is {MAX_BODY_CHARS} (rejected, not truncated)",
            "message",
        )


def _lower(value: str | None) -> str | None:
    return value.lower() if isinstance(value, str) else value


def _body_hash(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def _safe_filename(name: str) -> str:
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    base = _SAFE_NAME.sub("_", base).strip(" .") or "attachment"
    return base[:120]


def _att(a: Attachment) -> dict[str, Any]:
    return {"filename": a.filename, "content_type": a.content_type, "size": a.size, "path": a.path}


def _thread_headers(parent: MailRecord) -> tuple[str | None, tuple[str, ...]]:
    """RFC 5322 §3.6.4: In-Reply-To is the parent's Message-ID; References is the parent's
    References (or its In-Reply-To) followed by the parent's Message-ID."""
    from envelopay.protocol.compose import reply_headers
    from envelopay.protocol.parsed import Parsed

    stub = Parsed(
        protocol=False,
        type=None,
        valid=False,
        oops=None,
        message_id=parent.message_id,
        in_reply_to=parent.in_reply_to,
        references=parent.references,
    )
    return reply_headers(stub)


def _addr_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for _name, addr in getaddresses(values):
        if addr and "@" in addr:
            out.append(addr.lower())
    return out


def _msgids(value: str | None) -> list[str]:
    return _MSGID_RE.findall(value or "")


def _text_of(part: Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, errors="replace")
    except LookupError:
        return payload.decode("utf-8", errors="replace")


def _strip_html(text: str) -> str:
    text = re.sub(r"(?is)<(script|style).*?</\1>", " ", text)
    text = re.sub(r"(?s)<[^>]+>", " ", text)
    return re.sub(r"[ \t]+", " ", text).strip()


def _interpret(raw: bytes) -> dict[str, Any]:
    """Headers, text body and attachments of a stored message, never raising.

    Uses the stdlib's compat32 parser (fast and lax) and records its defects; the
    protocol view comes from envelopay.protocol.parse. A failure anywhere marks the
    message `malformed` but keeps what could be read."""
    problems: list[str] = []
    info: dict[str, Any] = {
        "message_id": None,
        "from_addr": "",
        "to_addrs": [],
        "cc_addrs": [],
        "subject": "",
        "header_date": None,
        "in_reply_to": None,
        "references": [],
        "reply_to": None,
        "body": "",
        "attachment_parts": [],
        "attachment_meta": [],
        "protocol_type": None,
    }
    try:
        msg = email.message_from_bytes(raw, policy=policy.compat32)
        problems.extend(type(d).__name__ for d in msg.defects)
        from envelopay.protocol.grammar import decode_subject

        def header(name: str) -> str | None:
            values = msg.get_all(name) or []
            if len(values) > 1:
                problems.append(f"duplicate_{name.lower()}")
            return str(values[0]) if values else None

        subject, ok = decode_subject(" ".join((header("Subject") or "").split()))
        if not ok:
            problems.append("undecodable_subject")
        info["subject"] = subject.replace("\r", " ").replace("\n", " ")
        mids = _msgids(header("Message-ID"))
        info["message_id"] = mids[0] if mids else None
        irt = _msgids(header("In-Reply-To"))
        info["in_reply_to"] = irt[0] if irt else None
        info["references"] = _msgids(header("References"))
        froms = _addr_list([header("From") or ""])
        info["from_addr"] = froms[0] if froms else ""
        if len(froms) != 1:
            problems.append("from_not_single")
        info["to_addrs"] = _addr_list([str(v) for v in msg.get_all("To") or []])
        info["cc_addrs"] = _addr_list([str(v) for v in msg.get_all("Cc") or []])
        reply_to = _addr_list([header("Reply-To") or ""])
        info["reply_to"] = reply_to[0] if len(reply_to) == 1 else None
        info["header_date"] = header("Date")
        if info["header_date"]:
            try:
                parsedate_to_datetime(info["header_date"])
            except (TypeError, ValueError):
                problems.append("bad_date")
        texts: list[str] = []
        htmls: list[str] = []
        parts = msg.get_payload() if msg.is_multipart() else [msg]
        if not isinstance(parts, list):
            parts = [msg]
            problems.append("multipart_without_parts")
        # Top-level parts only: an attached message/rfc822 is an attachment, not body.
        for part in parts:
            if not isinstance(part, Message):
                continue
            ctype = part.get_content_type()
            disposition = (part.get("Content-Disposition") or "").split(";")[0].strip().lower()
            filename = part.get_filename()
            if part.is_multipart() and ctype.startswith("multipart/"):
                for sub in part.get_payload():
                    if isinstance(sub, Message) and sub.get_content_type() == "text/plain":
                        texts.append(_text_of(sub))
                    elif isinstance(sub, Message) and sub.get_content_type() == "text/html":
                        htmls.append(_text_of(sub))
                continue
            if disposition == "attachment" or filename or ctype == "message/rfc822":
                data = part.get_payload(decode=True)
                if not isinstance(data, bytes):
                    data = part.as_bytes() if ctype == "message/rfc822" else b""
                name = filename or ("forwarded.eml" if ctype == "message/rfc822" else "attachment.bin")
                info["attachment_parts"].append((name, ctype, data))
                info["attachment_meta"].append(Attachment(name, ctype, len(data)))
            elif ctype == "text/plain":
                texts.append(_text_of(part))
            elif ctype == "text/html":
                htmls.append(_text_of(part))
        body = "\n".join(t for t in texts if t) or _strip_html("\n".join(htmls))
        if not body and not msg.is_multipart():
            body = raw.split(b"\r\n\r\n", 1)[-1].decode("utf-8", errors="replace")
        info["body"] = body.replace("\r\n", "\n")
    except Exception as exc:  # the stored bytes are the record; interpretation is best effort
        problems.append(f"unparseable: {type(exc).__name__}")
        info["body"] = raw.decode("utf-8", errors="replace")
    from envelopay.protocol.parse import parse

    parsed = parse(raw)
    if parsed.protocol:
        info["protocol_type"] = parsed.type.value if parsed.type is not None else "unknown"
        problems.extend(f"protocol:{p.code.value}:{p.field or ''}" for p in parsed.problems)
    structural = {"from_not_single", "multipart_without_parts", "undecodable_subject"}
    bad = any(p.startswith("unparseable") or p in structural or p.endswith("Defect") for p in problems) or (
        "parser_error" in parsed.warnings
    )
    info["status"] = "malformed" if bad else "ok"
    info["problems"] = problems
    return info


def smtp_send_fn(config: Any) -> SendFn:
    """A `SendFn` over SMTP submission (envelopay.mail.smtp; `config` is its SmtpConfig).

    One transaction per recipient (raw bytes, never re-flattened). The verdict is `sent`
    only when every recipient was accepted; otherwise `failed`, naming who got it."""
    from envelopay.mail.smtp import send_raw

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
