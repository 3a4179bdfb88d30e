"""Every indexed path of the mailbox gives what a naive scan of the whole mailbox gives:
`check` with each filter, regex `search` newest first, ranked search's blocks, `thread`,
after an incremental refresh, and after an upgrade from a v2 index. The mailbox mixes
case, unicode, long bodies (past the index's head and past its kept text), threads,
mail sent while other mail arrived (a refile into `sent`), and a clock that steps back.
"""

from __future__ import annotations

import asyncio
import random
import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.mail.mailbox import CheckFilter, Mailbox, MailRecord, OutgoingMail, SendResult
from envelopay.mail.mailbox import index as index_module
from envelopay.mail.mailbox.index import HEAD
from envelopay.mail.mailbox.threads import ThreadLink, thread_groups
from envelopay.mail.maildir import deliver_file

ME = "agent@garden.test"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SENDERS = ["Elodie@Example.TEST", "peer7@example3.test", "apeer7@example3.test", "Zoë@été.test", "bob@b.test"]
SUBJECTS = ["Invoice 12", "PAY | order 9", "Été à Paris", "Straße und Weg", "re: receipt", "orders?", "misc"]
WORDS = ["invoice", "receipt", "Été", "résumé", "straße", "xreceipt", "paying", "pay-day", "order", "note"]


def at_word_start(needle: str, text: str) -> bool:
    """The SPEC rule, written out: `needle` (case-folded) occurs in `text` where its first
    character starts a word (or anywhere, when it begins with a non-alphanumeric)."""
    needle, text = needle.lower(), text.lower()
    start = text.find(needle)
    while start >= 0:
        if not needle[:1].isalnum() or start == 0 or not text[start - 1].isalnum():
            return True
        start = text.find(needle, start + 1)
    return False


class Clock:
    """Each call a second later, except where told to step back."""

    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        self.t += timedelta(seconds=1)
        return self.t


def raw_mail(n: int, rng: random.Random) -> bytes:
    frm = rng.choice(SENDERS)
    subject = rng.choice(SUBJECTS)
    size = rng.choice([3, 40, 400])  # short, near the head, well past it
    body = " ".join(rng.choice(WORDS) for _ in range(size)) + f" serial{n}"
    refs = f"<m{n - 1}@x.test>" if n % 3 and n > 1 else ""
    head = f"From: {frm}\r\nTo: {ME}\r\nSubject: =?utf-8?b?{_b64(subject)}?=\r\nMessage-ID: <m{n}@x.test>\r\n"
    if refs:
        head += f"References: {refs}\r\nIn-Reply-To: {refs}\r\n"
    head += "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n"
    return (head + "\r\n" + body + "\r\n").encode()


def _b64(s: str) -> str:
    import base64

    return base64.b64encode(s.encode()).decode()


async def _sent(out: OutgoingMail) -> SendResult:
    return SendResult("sent")


def build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int = 120) -> tuple[Mailbox, list[str]]:
    """A mixed mailbox; returns it with every id in arrival order (a sent message counts
    as arriving when it is sent)."""
    monkeypatch.setattr(index_module, "TEXT_CAP", 2500)  # some bodies past the kept text
    clock = Clock()
    box = Mailbox(tmp_path / "agent", address=ME, now=clock, duplicate_window=None)
    rng = random.Random(7)
    order: list[str] = []
    for i in range(1, n + 1):
        if i == n // 2:
            clock.t -= timedelta(hours=1)  # the clock steps back
        order.append(box.deliver(raw_mail(i, rng)).id)
        if i % 17 == 0:  # mail arrives while a send is under way

            async def arriving(out: OutgoingMail, i: int = i) -> SendResult:
                order.append(box.deliver(raw_mail(10_000 + i, rng)).id)
                return SendResult("sent")

            res = asyncio.run(
                box.send(arriving, "bob@b.test", f"Invoice reply {i}", f"receipt for order {i}")
            )
            assert res.id is not None
            order.append(res.id)
    # Garden deliveries that only a refresh indexes.
    for i in range(n + 1, n + 11):
        deliver_file(box.folder_path("inbox"), raw_mail(i, rng))
    added = box.refresh()
    order += [r.id for r in sorted(added, key=lambda r: r.date)]

    async def last(out: OutgoingMail) -> SendResult:  # newer than its outbox row, older than its send
        order.append(box.deliver(raw_mail(20_000, rng) + b"receipt for you\r\n").id)
        return SendResult("sent")

    res = asyncio.run(box.send(last, "bob@b.test", "Last", "receipt for order " + "pad " * 300))
    assert res.id is not None
    order.append(res.id)
    return box, order


def everything(box: Mailbox, order: list[str]) -> list[MailRecord]:
    """Every message with its whole body, newest first (date, then arrival)."""
    recs = [box.get(i) for i in order if _exists(box, i)]
    rank = {i: k for k, i in enumerate(order)}
    return sorted(recs, key=lambda r: (r.date, rank[r.id]), reverse=True)


def _exists(box: Mailbox, mid: str) -> bool:
    return box._index.get(mid) is not None


@pytest.fixture
def mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Mailbox, list[MailRecord]]]:
    box, order = build(tmp_path, monkeypatch)
    yield box, everything(box, order)
    box.close()


FILTERS = [
    CheckFilter(from_="peer7@"),
    CheckFilter(from_="PEER7@", subject="order"),
    CheckFilter(from_="example3.test", subject="pay"),
    CheckFilter(from_="zoë@été"),
    CheckFilter(subject="été"),
    CheckFilter(subject="STRASSE"),
    CheckFilter(subject="straße und"),
    CheckFilter(subject="| order"),
    CheckFilter(contains="receipt", n=30),
    CheckFilter(contains="résumé", n=7),
    CheckFilter(contains="pay-day receipt"),
    CheckFilter(contains="serial9", n=50),
    CheckFilter(contains="ay", n=50),
    CheckFilter(contains="invoice", subject="invoice", sort="oldest", n=25),
    CheckFilter(contains="receipt", unread_only=True, n=200),
]


@pytest.mark.parametrize("flt", FILTERS, ids=lambda f: f"{f.from_}|{f.subject}|{f.contains}|{f.sort}")
def test_check_equals_a_naive_scan(mixed: tuple[Mailbox, list[MailRecord]], flt: CheckFilter) -> None:
    box, allrecs = mixed
    naive = [
        r
        for r in allrecs
        if r.folder == "inbox"
        and (flt.from_ is None or at_word_start(flt.from_, r.from_addr))
        and (flt.subject is None or at_word_start(flt.subject, r.subject))
        and (
            flt.contains is None
            or at_word_start(flt.contains, r.subject)
            or at_word_start(flt.contains, r.body)
        )
        and (not flt.unread_only or not r.read)
    ]
    if flt.sort == "oldest":
        naive.reverse()
    got = box.check(flt=flt)
    assert [r.id for r in got] == [r.id for r in naive[: flt.n]]


def test_check_lists_newest_first_across_a_clock_step_and_sends(
    mixed: tuple[Mailbox, list[MailRecord]],
) -> None:
    box, allrecs = mixed
    inbox = [r for r in allrecs if r.folder == "inbox"]
    assert [r.id for r in box.check(flt=CheckFilter(n=500))] == [r.id for r in inbox]
    sent = [r for r in allrecs if r.folder == "sent"]
    assert sent and [r.id for r in box.check("sent", CheckFilter(n=500))] == [r.id for r in sent]
    dates = [r.date for r in allrecs]
    assert dates == sorted(dates, reverse=True)  # a step back does not date mail before older mail


PATTERNS = [
    r"\breceipt\s+\w+",
    r"\bété\b",
    r"\binvoice\s+\d+",
    r"\bstraße",
    r"serial1\d\b",
    r"\bpay-day\s+rec",
]


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("limit", [1, 3, 500])
def test_search_equals_a_naive_scan(
    mixed: tuple[Mailbox, list[MailRecord]], pattern: str, limit: int
) -> None:
    box, allrecs = mixed
    rx = re.compile(pattern, re.IGNORECASE)
    naive = [
        r
        for r in allrecs
        if r.folder in ("inbox", "sent")
        and (rx.search(r.from_addr) or rx.search(r.subject) or rx.search(r.body))
    ]
    got = box.search(pattern, limit=limit)
    assert [r.id for r in got] == [r.id for r in naive[:limit]]
    assert any(len(r.body) > HEAD for r in naive) or limit == 3 or not naive


def test_ranked_search_orders_blocks_of_newest_candidates(
    mixed: tuple[Mailbox, list[MailRecord]], monkeypatch: pytest.MonkeyPatch
) -> None:
    box, allrecs = mixed
    rx = re.compile(r"\breceipt", re.I)
    naive = [
        r for r in allrecs if r.folder in ("inbox", "sent") and (rx.search(r.body) or rx.search(r.subject))
    ]
    whole = box.search("receipt", rank=True, limit=500)
    assert sorted(r.id for r in whole) == sorted(r.id for r in naive)  # every match, once
    monkeypatch.setattr(index_module, "RANK_WINDOW", 8)
    assert len(box.search("receipt", rank=True, limit=1)) == 1
    # With limit 1 a block holds max(RANK_WINDOW, 5) = 8 full-text candidates (any folder).
    db = box._index.db
    cands = [
        r[0]
        for r in db.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH '\"receipt\"*' ORDER BY rowid DESC"
        )
    ]
    block = {seq: k // 8 for k, seq in enumerate(cands)}
    seq_of = dict(db.execute("SELECT id, seq FROM messages").fetchall())
    walked = [
        block[seq_of[r.id]]
        for r in index_module.MailIndex.search(
            box._index, '"receipt"*', ("inbox", "sent"), truncate=0, rank=True, limit=1
        )
    ]
    assert walked == sorted(walked) and len(set(walked)) > 2  # newest block first, each ranked inside


def test_thread_equals_a_naive_grouping(mixed: tuple[Mailbox, list[MailRecord]]) -> None:
    box, allrecs = mixed
    groups = thread_groups(ThreadLink(r.id, r.message_id, r.in_reply_to, list(r.references)) for r in allrecs)
    for r in allrecs[::5]:
        members = {i for i, g in groups.items() if g == groups[r.id]}
        assert {t.id for t in box.thread(r.id)} == members


def test_refresh_is_incremental_and_found_by_every_path(mixed: tuple[Mailbox, list[MailRecord]]) -> None:
    box, _ = mixed
    assert box.refresh() == []
    path = deliver_file(
        box.folder_path("inbox"),
        b"From: Newcomer@Late.TEST\r\nTo: agent@garden.test\r\nSubject: =?utf-8?q?Zebra_=C3=A9t=C3=A9?=\r\n"
        b"\r\nquagga r\xc3\xa9sum\xc3\xa9\r\n",
    )
    [new] = box.refresh()
    assert box.refresh() == []
    assert [r.id for r in box.check(flt=CheckFilter(from_="newcomer@late", n=5))] == [new.id]
    assert [r.id for r in box.check(flt=CheckFilter(contains="QUAGGA"))] == [new.id]
    assert [r.id for r in box.search(r"\bzebra\s+été")] == [new.id]
    assert box.check(flt=CheckFilter(n=1))[0].id == new.id
    assert path.exists()


V2_SCHEMA = """
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, folder TEXT NOT NULL,
    name TEXT NOT NULL UNIQUE, file TEXT NOT NULL, message_id TEXT, from_addr TEXT NOT NULL,
    from_lc TEXT NOT NULL, to_addrs TEXT NOT NULL, cc_addrs TEXT NOT NULL, subject TEXT NOT NULL,
    subject_lc TEXT NOT NULL, ts REAL NOT NULL, header_date TEXT, in_reply_to TEXT, refs TEXT NOT NULL,
    reply_to TEXT, body_head TEXT NOT NULL, body_len INTEGER NOT NULL, attachments TEXT NOT NULL,
    read INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, problems TEXT NOT NULL, protocol_type TEXT,
    thread TEXT NOT NULL);
CREATE INDEX messages_folder_ts ON messages(folder, ts);
CREATE INDEX messages_msgid ON messages(message_id);
CREATE INDEX messages_thread ON messages(thread, ts);
CREATE VIRTUAL TABLE messages_fts USING fts5(from_addr, subject, body, content='');
CREATE TABLE thread_ids (message_id TEXT PRIMARY KEY, thread TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE threads (thread TEXT PRIMARY KEY, last_ts REAL NOT NULL) WITHOUT ROWID;
CREATE TABLE dirs (dir TEXT PRIMARY KEY, mtime_ns INTEGER NOT NULL) WITHOUT ROWID;
PRAGMA user_version = 2;
"""


def test_a_v2_index_is_upgraded_in_date_order(tmp_path: Path) -> None:
    """A v2 index held rowids in arrival order and a sent message's later date at its old
    rowid; after the upgrade newest-first text queries see it where its date puts it."""
    agent = tmp_path / "agent"
    with Mailbox(agent, address=ME) as box:
        inbox, sent = box.folder_path("inbox"), box.folder_path("sent")
    files = [
        (sent, "sent", 300.0, "Invoice reply", "receipt sent late " + "pad " * 400),
        (inbox, "inbox", 100.0, "Invoice A", "receipt one"),
        (inbox, "inbox", 200.0, "Invoice B", "receipt two " + "pad " * 400 + "tail-word"),
    ]
    (agent / "mailbox" / "index.sqlite3").unlink()
    db = sqlite3.connect(agent / "mailbox" / "index.sqlite3")
    db.executescript(V2_SCHEMA)
    for k, (folder_dir, folder, ts, subject, body) in enumerate(files):
        raw = f"From: peer@x.test\r\nTo: {ME}\r\nSubject: {subject}\r\nMessage-ID: <v{k}@x.test>\r\n"
        raw += f"\r\n{body}\r\n"
        name = deliver_file(folder_dir, raw.encode()).name
        cur = db.execute(
            "INSERT INTO messages (id, folder, name, file, message_id, from_addr, from_lc, to_addrs,"
            " cc_addrs, subject, subject_lc, ts, refs, body_head, body_len, attachments, read, status,"
            " problems, thread)"
            " VALUES (?, ?, ?, ?, ?, 'peer@x.test', 'peer@x.test', '[]', '[]', ?, ?, ?, '[]', ?, ?, '[]', ?,"
            " 'ok', '[]', ?)",
            (
                f"{k:012x}",
                folder,
                name,
                f"new/{name}",
                f"<v{k}@x.test>",
                subject,
                subject.lower(),
                ts,
                body[:HEAD],
                len(body),
                int(k == 1),
                f"t:{k}",
            ),
        )
        db.execute(
            "INSERT INTO messages_fts (rowid, from_addr, subject, body) VALUES (?, 'peer@x.test', ?, ?)",
            (cur.lastrowid, subject, body),
        )
    db.commit()
    db.close()
    with Mailbox(agent, address=ME) as box:
        assert box.refresh() == []  # the rows are the files' records
        got = box.search(r"\breceipt\s+\w+", limit=2)
        assert [r.id for r in got] == ["000000000000", "000000000002"]  # by date, not old rowid
        assert [r.id for r in box.search("tail-word")] == ["000000000002"]
        assert box._index.text("000000000002") is not None  # the kept text, read from the file once
        assert box.get("000000000001").read and not box.get("000000000002").read
        assert [r.id for r in box.check(flt=CheckFilter(contains="receipt"))] == [
            "000000000002",
            "000000000001",
        ]
        version = box._index.db.execute("PRAGMA user_version").fetchone()[0]
        assert version == index_module._VERSION
