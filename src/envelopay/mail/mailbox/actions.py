"""The agent mailbox and its actions: deliver, check, search, read, archive, delete,
thread, compose, send and reply.

`Mailbox` joins the parts: Maildir files (storage), their SQLite index (index), what a
stored message says (interpret), extracted attachments (attachments), threading
(threads), plain composition (outgoing) and the send log with its loop guard (guard).
Each action here validates its input, then asks those parts; bad input is refused
before any I/O with `MailboxError` (see inputs).

A send is filed where its verdict puts it: composed into `outbox`, then moved to `sent`
when the send function says `sent`, dropped (the log row stays) when it says `blocked`
or `failed`, and left in `outbox` for `pending_approval` and `unknown`.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.mail.imap import Processed
from envelopay.mail.line_ends import read_message
from envelopay.mail.mailbox.attachments import extract, remove_extracted
from envelopay.mail.mailbox.contacts import ContactBook
from envelopay.mail.mailbox.fts import fold, fts_query, nfc, word_start
from envelopay.mail.mailbox.guard import SendGuard
from envelopay.mail.mailbox.index import MailIndex
from envelopay.mail.mailbox.inputs import Folder, MailboxError, check_folder, check_id, single_address
from envelopay.mail.mailbox.interpret import body_text, interpret
from envelopay.mail.mailbox.outgoing import PlainDraft, compose_plain
from envelopay.mail.mailbox.records import (
    MAX_RESULTS,
    CheckFilter,
    MailRecord,
    OutgoingMail,
    SendFn,
    SendResult,
)
from envelopay.mail.mailbox.scan import Progress, scan_folders
from envelopay.mail.mailbox.storage import MailFolders, base_name
from envelopay.mail.mailbox.threads import oldest_first, reply_recipients, reply_subject, thread_headers
from envelopay.protocol.compose import compose_message, message_json

if TYPE_CHECKING:  # imap imports aioimaplib lazily; the mailbox works without it
    from envelopay.mail.imap import ImapMessage, Processed

__all__ = ["MALFORMED_FLAG", "Mailbox"]

MALFORMED_FLAG = "$EnvelopayMalformed"


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
    progress  -- `progress(done, total)` after each committed step of an index upgrade on
                 open (an interrupted upgrade goes on at the next open)
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
        progress: Progress | None = None,
    ) -> None:
        self.agent_dir = Path(agent_dir).resolve()
        self.address = single_address("address", address).lower() if address is not None else None
        self._now = now
        self._new_id = new_id
        self._files = MailFolders(self.agent_dir, inbox)
        self.root = self._files.root
        self.contacts = ContactBook(self.root / "contacts.json")
        self._index = MailIndex(self.root / "index.sqlite3", body_of=self._body_of, progress=progress)
        self._guard = SendGuard(self._index.db, duplicate_window, now)

    @property
    def duplicate_window(self) -> timedelta | None:
        return self._guard.window

    @duplicate_window.setter
    def duplicate_window(self, window: timedelta | None) -> None:
        self._guard.window = window

    def compact_sends(self, older_than: timedelta) -> int:
        """Retention of the send log: rows older than `older_than` go; how many went.
        The loop guard reads the log back as far as its window, so a shorter retention is
        refused (MailboxError `invalid_retention`)."""
        window = self._guard.window
        if window is not None and older_than < window:
            raise MailboxError(
                "invalid_retention",
                f"{older_than} is shorter than the duplicate-send window ({window}), which reads the log",
                "older_than",
            )
        return self._guard.prune((self._now() - older_than).timestamp())

    def close(self) -> None:
        self._index.close()

    def __enter__(self) -> Mailbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ storing
    def folder_path(self, folder: str) -> Path:
        return self._files.path(folder)

    def deliver(self, raw: bytes, folder: Folder = "inbox") -> MailRecord:
        """Store raw bytes (atomic Maildir write) and index them; never refuses content."""
        return self._index_file(folder, self._files.store(folder, bytes(raw)))

    async def imap_consumer(self, msg: ImapMessage) -> bool | Processed:
        """An `ImapSource` consumer: store the exact bytes in the inbox. Mail that could not
        be understood is kept all the same and also flagged $EnvelopayMalformed on the server."""
        rec = self.deliver(bytes(msg.raw), "inbox")
        return Processed(frozenset({MALFORMED_FLAG})) if rec.status == "malformed" else True

    def refresh(self, progress: Progress | None = None) -> list[MailRecord]:
        """Index Maildir files that arrived by other means (garden delivery, restores).

        Only directories whose mtime moved since their last listing are listed (see
        envelopay.mail.mailbox.scan), so on an unchanged mailbox this reads no listing.
        The first open streams: files are indexed in batches of one transaction each, so
        an interrupted refresh (Ctrl-C, a kill) keeps what it did and the next one goes
        on from there; `progress(done, total)` is called after each batch."""
        return scan_folders(self._files, self._index, self._index_file, progress)

    def _index_file(self, folder: str, path: Path) -> MailRecord:
        name = base_name(path.name)
        known = self._index.by_name(name)
        if known is not None:
            return known
        raw = read_message(path)
        mid = self._new_id()
        info = interpret(raw)
        # Received attachments are extracted for the agent; our own copies are only listed.
        target = self._files.attachments_dir(mid)
        if folder == "inbox":
            atts = extract(target, self.agent_dir, info.attachment_parts)
        else:
            atts = list(info.attachment_meta)
        added = self._index.add(
            mid, folder, name, info, atts, ts=self._now().timestamp(), file=self._files.rel(path)
        )
        if not added:
            # Another process (a concurrent refresh) indexed this file first: keep its record.
            remove_extracted(target, ignore_errors=True)
            existing = self._index.by_name(name)
            assert existing is not None
            return existing
        return self._whole(self._index.get(mid), info.body)

    # ------------------------------------------------------------------ reading
    def _get(self, mid: str, truncate: int = 0) -> MailRecord:
        rec = self._index.get(mid, truncate)
        if rec is None:
            raise MailboxError(
                "not_found", f"no message {mid!r} in this mailbox (ids come from check/search)", "id"
            )
        return self._whole(rec) if truncate == 0 or truncate > len(rec.body) else rec

    def _whole(self, rec: MailRecord | None, body: str | None = None) -> MailRecord:
        """The record with its whole body: the index keeps the first characters, the
        Maildir file the rest (read only when the body is longer than the index's part)."""
        assert rec is not None
        if rec.body_complete:
            return rec
        if body is None:
            body = self._index.text(rec.id)
        if body is None:  # past the index's text cap
            body = body_text(read_message(self._path_of(rec)))
        cut = len(rec.preview.rstrip("…")) if rec.preview.endswith("…") else 0
        preview = body if not cut or cut >= len(body) else body[:cut] + "…"
        return replace(rec, body=body, preview=preview, body_complete=True)

    def _body_of(self, folder: str, name: str, last_seen: str) -> str | None:
        """A message file's text body (for an index upgrade), or None when it is gone."""
        path = self._files.locate(folder, name, last_seen)
        return None if path is None else body_text(read_message(path))

    def get(self, mid: str) -> MailRecord:
        return self._get(check_id(mid))

    def raw(self, mid: str) -> bytes:
        """A message's bytes exactly as received (the file holds them with LF line ends)."""
        return read_message(self._path_of(self._get(check_id(mid), truncate=1)))

    def _path_of(self, rec: MailRecord) -> Path:
        folder, name, last_seen = self._index.location(rec.id)
        path = self._files.locate(folder, name, last_seen)
        if path is None:
            raise MailboxError("not_found", f"message file for {rec.id} is missing from {rec.folder}", "id")
        if self._files.rel(path) != last_seen:
            self._index.moved(rec.id, self._files.rel(path))
        return path

    def check(self, folder: str = "inbox", flt: CheckFilter | None = None) -> list[MailRecord]:
        """List a folder, newest first by default, with the seed's filters (text filters:
        the text found where a word starts, envelopay.mail.mailbox.fts.word_start)."""
        flt = flt or CheckFilter()
        out: list[MailRecord] = []
        needle = word_start(fold(flt.contains)) if flt.contains else None
        for r, exact in self._index.check(check_folder(folder), flt):  # in order
            if not exact:  # a body past the index's text: its file decides
                assert needle is not None
                if not (needle.search(fold(r.subject)) or needle.search(fold(self._whole(r).body))):
                    continue
            out.append(self._whole(r) if flt.truncate == 0 else r)
            if len(out) >= flt.n:
                break
        return sorted(out, key=lambda r: r.date, reverse=flt.sort == "newest")

    def search(
        self,
        query: str,
        folder: str | None = None,
        *,
        truncate: int = 500,
        limit: int = 50,
        rank: bool = False,
    ) -> list[MailRecord]:
        """Regex over sender, subject and body; without a folder: inbox and sent. At most
        `limit` results, newest first, or with `rank` best first by BM25 within blocks of
        the newest max(100, 5 x limit) candidates (MailIndex._ranked). The full-text index
        picks the candidates (envelopay.mail.mailbox.fts); the regex decides, on the text
        the index keeps (the file only past TEXT_CAP). Pattern and texts are compared in
        NFC (a word typed composed finds it stored decomposed, and the reverse)."""
        query = nfc(query)
        try:
            pattern = re.compile(query, re.IGNORECASE)
        except re.error as exc:
            raise MailboxError("invalid_regex", f"not a valid regular expression: {exc}", "query") from exc
        if not 1 <= limit <= MAX_RESULTS:
            raise MailboxError("invalid_filter", f"must be 1 to {MAX_RESULTS:,}", "limit")
        folders = (check_folder(folder),) if folder is not None else ("inbox", "sent")
        out: list[MailRecord] = []
        # Ranking weighs every term, and a prefix as one phrase (so: one token, or the prefix).
        fts = fts_query(query, narrowed=not rank, expand=self._index.expander(single=rank))
        for r in self._index.search(fts, folders, truncate=truncate, rank=rank, limit=limit):
            if (
                pattern.search(nfc(r.from_addr))
                or pattern.search(nfc(r.subject))
                or pattern.search(nfc(r.body))
                or (not r.body_complete and pattern.search(nfc(self._whole(r).body)))
            ):
                out.append(r)
            if len(out) >= limit:
                break
        if not rank:
            out.sort(key=lambda r: r.date, reverse=True)
        return [self._whole(r) if truncate == 0 else r for r in out]

    def read(self, ids: Sequence[str]) -> list[MailRecord]:
        """Full records; inbox messages among them become read."""
        recs = [self._get(check_id(i)) for i in ids]
        self._index.mark_read([r.id for r in recs if r.folder == "inbox"])
        return [self._get(r.id) for r in recs]

    def dismiss(self, ids: Sequence[str]) -> int:
        """Mark inbox messages read without returning them."""
        recs = [self._get(check_id(i)) for i in ids]
        return self._index.mark_read([r.id for r in recs if r.folder == "inbox"])

    # ------------------------------------------------------------------ filing
    def _in_folders(
        self, ids: Sequence[str], allowed: tuple[str, ...], code: str, verb: str
    ) -> list[MailRecord]:
        """The records of `ids`, all of them in `allowed` folders, or MailboxError(code)."""
        recs = [self._get(check_id(i)) for i in ids]
        for r in recs:
            if r.folder not in allowed:
                raise MailboxError(
                    code, f"{r.id} is in {r.folder}; only {' and '.join(allowed)} mail is {verb}", "id"
                )
        return recs

    def archive(self, ids: Sequence[str]) -> list[MailRecord]:
        """Move inbox messages to archive (the file is renamed; the read mark is dropped)."""
        recs = self._in_folders(ids, ("inbox",), "wrong_folder", "archived")
        for r in recs:
            dst = self._files.move(self._path_of(r), "archive")
            self._index.refile(r.id, "archive", read=False, file=self._files.rel(dst))
        return [self._get(r.id) for r in recs]

    def delete(self, ids: Sequence[str]) -> int:
        """Remove inbox/archive messages for good; sent (and outbox) mail is refused."""
        recs = self._in_folders(ids, ("inbox", "archive"), "refused", "deleted")
        for r in recs:
            self._path_of(r).unlink()
            self._index.remove(r.id)
            remove_extracted(self._files.attachments_dir(r.id))
        return len(recs)

    # ------------------------------------------------------------------ threads
    def thread(self, mid: str, *, truncate: int = 500) -> list[MailRecord]:
        """Every message (all folders) in the same References thread, oldest first."""
        rec = self._get(check_id(mid), truncate=1)
        return oldest_first(self._index.thread(rec.id, truncate))

    def threads(self, folder: str | None = None, *, limit: int | None = None) -> list[list[MailRecord]]:
        """Threads (each oldest first), most recently active first; `limit` of them."""
        f = check_folder(folder) if folder is not None else None
        out: list[list[MailRecord]] = []
        for key in self._index.recent_threads():
            t = oldest_first(self._whole(r) for r in self._index.thread_rows(key))
            if t and (f is None or any(r.folder == f for r in t)):
                out.append(t)
                if limit is not None and len(out) >= limit:
                    break
        return sorted(out, key=lambda t: t[-1].date, reverse=True)

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
        draft = PlainDraft(to, subject, body, cc, attachments, in_reply_to, references)
        return compose_plain(self._require_self(), draft, agent_dir=self.agent_dir, now=self._now())

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
        self._guard.refuse_duplicate(out.recipients[0], body)
        return await self._dispatch(send_fn, out, body)

    async def send_raw(self, send_fn: SendFn, out: OutgoingMail, body_for_guard: str) -> SendResult:
        """Send already composed bytes (protocol mail from `envelopay.protocol.compose`)."""
        for r in out.recipients:
            single_address("to", r)
        self._guard.refuse_duplicate(out.recipients[0], body_for_guard)
        return await self._dispatch(send_fn, out, body_for_guard)

    async def _dispatch(self, send_fn: SendFn, out: OutgoingMail, body: str) -> SendResult:
        queued = self.deliver(out.raw, "outbox")
        try:
            result = await send_fn(out)
        except Exception as exc:
            # A broken transport is a failed send: it must not count for the guard.
            result = SendResult("failed", f"{type(exc).__name__}: {exc}")
        self._guard.log(out.recipients, body, result.status, out.message_id)
        if result.status == "sent":
            dst = self._files.move(self._path_of(queued), "sent", flags="S")
            self._index.refile(
                queued.id,
                "sent",
                read=True,
                file=self._files.rel(dst),
                ts=self._now().timestamp(),
                body=queued.body,
            )
        elif result.status in ("blocked", "failed"):
            # Not sent and never will be from here: drop the outbox copy, keep the log row.
            self._path_of(queued).unlink()
            self._index.remove(queued.id)
            return SendResult(result.status, result.detail, None, out.message_id)
        return SendResult(result.status, result.detail, queued.id, out.message_id)

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
        parent = self._get(check_id(mid))
        to, cc = self.reply_recipients(parent, reply_all=reply_all)
        in_reply_to, refs = thread_headers(parent)
        return await self.send(
            send_fn,
            to,
            reply_subject(parent.subject),
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
        parent = self._get(check_id(mid))
        sender = self._require_self()
        to, _ = self.reply_recipients(parent, reply_all=False)
        in_reply_to, refs = thread_headers(parent)
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
        return reply_recipients(parent, self._require_self(), reply_all=reply_all)

    def _require_self(self) -> str:
        if self.address is None:
            raise MailboxError("missing_address", "the mailbox has no own address configured", "address")
        return self.address
