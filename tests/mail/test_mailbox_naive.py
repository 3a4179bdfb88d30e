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
import unicodedata
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


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def at_word_start(needle: str, text: str) -> bool:
    """The SPEC rule, written out: `needle` (case-folded, NFC) occurs in `text` (the same)
    where its first character starts a word (or anywhere, when it begins with a
    non-alphanumeric)."""
    needle, text = nfc(needle.lower()), nfc(text.lower())
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
    cands = [  # newest first: the full-text rowid is -seq
        -r[0]
        for r in db.execute(
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH '\"receipt\"*' ORDER BY rowid"
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


def _write_v2(agent: Path) -> None:
    """Three files and the v2 index of them: rowids in arrival order, a sent message's
    later date at its old rowid."""
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


def test_a_v2_index_is_upgraded_in_date_order(tmp_path: Path) -> None:
    """After the upgrade newest-first text queries see a v2 message where its date puts it."""
    agent = tmp_path / "agent"
    _write_v2(agent)
    _assert_upgraded_v2(agent)


def test_an_interrupted_v2_upgrade_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One message per step, Ctrl-C after the first: the set-aside table keeps the other two,
    the version stays 2, and the next open finishes with the same answers."""
    from envelopay.mail.mailbox import index_upgrade

    monkeypatch.setattr(index_upgrade, "STEP", 1)
    agent = tmp_path / "agent"
    _write_v2(agent)

    def stop(done: int, total: int) -> None:
        assert (done, total) == (1, 3)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Mailbox(agent, address=ME, progress=stop)
    db = sqlite3.connect(agent / "mailbox" / "index.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    assert db.execute("SELECT subject FROM messages").fetchall() == [("Invoice A",)]  # the oldest date
    assert db.execute("SELECT count(*) FROM messages_v2").fetchone()[0] == 2
    db.close()
    _assert_upgraded_v2(agent)


def _assert_upgraded_v2(agent: Path) -> None:
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
        ours, fts = _vocabulary(box)  # the rows indexed again filled the vocabulary
        assert ours == fts and {"receipt", "tail", "word", "invoice"} <= ours
        assert [r.id for r in box.check(flt=CheckFilter(contains="rece"))] == [
            "000000000002",
            "000000000001",
        ]


# ---------------------------------------------------------------- prefix expansion (v4)
# Words the vocabulary must fold exactly as the full-text index does: diacritics (composed
# and not), apostrophes, digits (ASCII and full-width), ligatures, dotted capitals, scripts
# without case, a token longer than the vocabulary keeps, and one prefix covering more
# tokens than EXPAND_CAP.
UNI_WORDS = [
    "naïve",
    "NAÏVE",
    "naïveté",
    "naive",
    "l'été",
    "l’étage",
    "O’Brien",
    "o'brien's",
    "İstanbul",
    "ﬁnance",
    "finale",
    "Straße",
    "STRASSE",
    "Ωmega",
    "ωmegas",
    "x1",
    "x10",
    "x1b",
    "x2",
    "２０２６",
    "2026-12",
    "snake_case",
    "日本語",
    "emoji😀word",
    "e\u0301te\u0301",
    "receipt",
    "receipts",
    "Receipted",
    "long" + "q" * 300,
    *[f"zq{i}" for i in range(40)],
]
PREFIXES = [
    "naï",
    "nai",
    "naive",
    "l",
    "l'é",
    "été",
    "o",
    "o’b",
    "obr",
    "istan",
    "ﬁn",
    "fin",
    "stra",
    "straß",
    "ωme",
    "Ωmeg",
    "x1",
    "x",
    "２０",
    "20",
    "snake",
    "snake_c",
    "日本",
    "emoji",
    "rec",
    "receipt",
    "RECEIPTS",
    "long",
    "longq",
    "zq",
    "zq1",
    "zq39",
    "absent",
]


def _uni_mail(k: int, rng: random.Random) -> bytes:
    words = " ".join(rng.choice(UNI_WORDS) for _ in range(rng.choice([2, 6, 30])))
    subject = rng.choice(UNI_WORDS)
    return (
        f"From: {rng.choice(SENDERS)}\r\nTo: {ME}\r\nSubject: =?utf-8?b?{_b64(subject)}?=\r\n"
        f"Message-ID: <u{k}@x.test>\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: 8bit\r\n\r\n{words} n{k}\r\n"
    ).encode()


@pytest.fixture
def unicode_box(tmp_path: Path) -> Iterator[Mailbox]:
    clock = Clock()
    box = Mailbox(tmp_path / "agent", address=ME, now=clock, duplicate_window=None)
    rng = random.Random(3)
    for k in range(150):
        box.deliver(_uni_mail(k, rng))
    yield box
    box.close()


def _everything(box: Mailbox) -> list[MailRecord]:
    """Every message with its whole body, newest first (ids are in arrival order here)."""
    ids = [r[0] for r in box._index.db.execute("SELECT id FROM messages ORDER BY seq DESC")]
    return [box.get(i) for i in ids]


def _vocabulary(box: Mailbox) -> tuple[set[str], set[str]]:
    """(our `terms`, the full-text index's own tokens as fts5vocab reads them)."""
    db = box._index.db
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.fts_vocab USING fts5vocab(main, messages_fts, row)")
    ours = {r[0] for r in db.execute("SELECT term FROM terms")}
    fts = {r[0][: index_module.TERM_KEEP] for r in db.execute("SELECT term FROM temp.fts_vocab")}
    return ours, fts


def _check_all_prefixes(box: Mailbox, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every prefix as `check --contains`, `--subject` and a regex search gives the naive
    scan's answer, with the expansion and with prefix queries only (EXPAND_CAP 0)."""
    allrecs = _everything(box)
    for p in PREFIXES:
        flts = [CheckFilter(contains=p, n=400), CheckFilter(subject=p, n=400)]
        rx = re.compile(re.escape(nfc(p)), re.IGNORECASE)
        naive_check = [
            [
                r.id
                for r in allrecs
                if r.folder == "inbox"
                and (at_word_start(p, r.subject) or (f.contains is not None and at_word_start(p, r.body)))
            ]
            for f in flts
        ]
        naive_search = [
            r.id
            for r in allrecs
            if r.folder in ("inbox", "sent")
            and (rx.search(nfc(r.from_addr)) or rx.search(nfc(r.subject)) or rx.search(nfc(r.body)))
        ]
        for cap in (index_module.EXPAND_CAP, 0):
            with monkeypatch.context() as m:
                m.setattr(index_module, "EXPAND_CAP", cap)
                for f, naive in zip(flts, naive_check, strict=True):
                    assert [r.id for r in box.check(flt=f)] == naive, (p, f, cap)
                # the regex's first word: its matches start a word of the text
                got = [r.id for r in box.search(re.escape(p), limit=500)]
                assert got == [i for i in naive_search if _starts_word(box, i, p)], (p, cap)


def _starts_word(box: Mailbox, mid: str, p: str) -> bool:
    r = box.get(mid)
    rx = re.compile(r"(?<![^\W_])" + re.escape(nfc(p)), re.IGNORECASE)  # the first word's rule (SPEC)
    return any(rx.search(nfc(t)) for t in (r.from_addr, r.subject, r.body))


def test_the_vocabulary_is_the_full_text_index_tokens(unicode_box: Mailbox) -> None:
    ours, fts = _vocabulary(unicode_box)
    assert ours == fts
    assert {"naive", "naivete", "l", "ete", "etage", "istanbul", "straße", "strasse", "x1b"} <= ours
    assert "２０２６" in ours
    assert {"日本語", "emoji", "word", "snake", "case"} <= ours  # separators: U+1F600, "_"


def test_prefixes_expand_to_the_tokens_they_cover(unicode_box: Mailbox) -> None:
    expand = unicode_box._index.expander()
    assert expand("receipt") == ["receipt", "receipted", "receipts"]
    assert expand("naï") == expand("NAI") == ["naive", "naivete"]
    assert expand("Ωmeg") == ["ωmega", "ωmegas"]
    assert expand("x1") == ["x1", "x10", "x1b"]
    assert expand("absent") == []
    assert expand("zq") is None  # more than EXPAND_CAP: the prefix query
    assert len(expand("zq1") or []) == 11
    assert expand("long") is None  # a token longer than the vocabulary keeps
    assert unicode_box._index.expander(single=True)("receipt") is None  # BM25: one token or the prefix
    assert unicode_box._index.expander(single=True)("receipte") == ["receipted"]
    flt = CheckFilter(contains="naï")
    _, args = index_module.check_query("inbox", flt, expand)
    assert args[0] == '{subject body} : ("naive" OR "naivete")'
    _, args = index_module.check_query("inbox", CheckFilter(contains="zq"), expand)
    assert args[0] == '{subject body} : "zq"*'


def test_expanded_prefixes_equal_a_naive_scan(unicode_box: Mailbox, monkeypatch: pytest.MonkeyPatch) -> None:
    _check_all_prefixes(unicode_box, monkeypatch)


def test_expansion_follows_archive_delete_refile_and_new_words(
    unicode_box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    box = unicode_box
    inbox = [r.id for r in box.check(flt=CheckFilter(n=500))]
    box.archive(inbox[:20])
    box.delete(inbox[20:40])
    rng = random.Random(5)

    async def sent(out: OutgoingMail) -> SendResult:
        box.deliver(_uni_mail(900, rng))  # arrives while the send is under way (a refile)
        return SendResult("sent")

    res = asyncio.run(box.send(sent, "bob@b.test", "naïvetés receipt", "finales x1c zq1new 日本"))
    assert res.id is not None
    box.deliver(_uni_mail(901, rng) + "naïf receiptless x1d\r\n".encode())
    ours, fts = _vocabulary(box)
    assert ours == fts and {"naivetes", "naif", "receiptless", "x1c", "x1d", "zq1new"} <= ours
    assert "x1d" in (box._index.expander()("x1") or [])
    _check_all_prefixes(box, monkeypatch)


def test_ranked_search_expanded_ranks_as_the_prefix(
    unicode_box: Mailbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix covering one token is queried as that token: BM25 gives the same order."""
    box = unicode_box
    for word in ("receipte", "ﬁnan", "emoji", "２０２", "zq", "naï"):
        monkeypatch.setattr(index_module, "RANK_WINDOW", 8)
        got = [r.id for r in box.search(word, rank=True, limit=1)] + [
            r.id for r in box.search(word, rank=True, limit=200)
        ]
        monkeypatch.setattr(index_module, "EXPAND_CAP", 0)
        monkeypatch.setattr(index_module.MailIndex, "expander", lambda self, single=False: lambda w: None)
        want = [r.id for r in box.search(word, rank=True, limit=1)] + [
            r.id for r in box.search(word, rank=True, limit=200)
        ]
        monkeypatch.undo()
        assert got == want and len(got) > 1, word


def test_a_v3_index_gets_its_vocabulary(unicode_box: Mailbox, tmp_path: Path) -> None:
    box = unicode_box
    before = [r.id for r in box.check(flt=CheckFilter(contains="naï", n=300))]
    db = box._index.db
    db.execute("DROP TABLE terms")
    db.execute("PRAGMA user_version = 3")
    db.execute("DROP TABLE ep_versions")  # v3 knew nothing of the one migrator
    box.close()
    with Mailbox(tmp_path / "agent", address=ME) as again:
        ours, fts = _vocabulary(again)
        assert ours == fts and "naivete" in ours
        assert again._index.db.execute("PRAGMA user_version").fetchone()[0] == index_module._VERSION
        assert [r.id for r in again.check(flt=CheckFilter(contains="naï", n=300))] == before
        assert before
    box._index = again._index  # closed with the fixture (a closed connection closes again quietly)
