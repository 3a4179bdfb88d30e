"""Composed and decomposed Unicode (NFC, NFD) are one text to every mailbox query; the
full-text rowid is -seq, written in rowid order; an index v4 is upgraded to v5.

Real SQLite, real Maildir files: each query's answer is compared with what the words
typed in either form must find.
"""

from __future__ import annotations

import base64
import io
import shutil
import signal
import sqlite3
import subprocess
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from envelopay.mail.mailbox import CheckFilter, Mailbox
from envelopay.mail.mailbox import index as index_module
from envelopay.mail.mailbox.interpret import Interpretation

ME = "agent@garden.test"
TEXT_CAP = 3000  # the last message's body is longer: its file is the only full copy


def nfc(s: str) -> str:
    return unicodedata.normalize("NFC", s)


def nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


def _mail(k: int, frm: str, subject: str, body: str) -> bytes:
    return (
        f"From: {frm}\r\nTo: {ME}\r\nSubject: =?utf-8?b?{base64.b64encode(subject.encode()).decode()}?=\r\n"
        f"Message-ID: <n{k}@x.test>\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Transfer-Encoding: 8bit\r\n\r\n{body}\r\n"
    ).encode()


PAD = "filler " * 200  # pushes a word past the row's head (HEAD), into the kept text


def _letters(form: str) -> list[bytes]:
    """The same four messages, every non-ASCII text in `form` (NFC or NFD)."""
    f = nfc if form == "NFC" else nfd
    k = 0 if form == "NFC" else 10
    return [
        _mail(k, "zoe@b.test", f("Résumé du café"), f("Le café était crème.")),
        _mail(k + 1, "bob@b.test", "misc", PAD + f("une crème brûlée")),  # past HEAD
        _mail(k + 2, "bob@b.test", "misc", "x " * (TEXT_CAP // 2) + f("naïve fin")),  # past TEXT_CAP
        _mail(k + 3, "cafe@b.test", "Cafe noir", "cafe creme etait"),  # no diacritics: not the same words
    ]


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mailbox]:
    monkeypatch.setattr(index_module, "TEXT_CAP", TEXT_CAP)
    b = Mailbox(tmp_path / "agent", address=ME, duplicate_window=None)
    for raw in _letters("NFC") + _letters("NFD"):
        b.deliver(raw)
    yield b
    b.close()


def _ids(box: Mailbox) -> dict[int, str]:
    """The four letters' ids by position, of each form: {0: NFC letter 0, 10: NFD letter 0, ...}."""
    by_mid = {r.message_id: r.id for r in box.check(flt=CheckFilter(n=100))}
    return {k: by_mid[f"<n{k}@x.test>"] for k in (0, 1, 2, 3, 10, 11, 12, 13)}


def _answers(box: Mailbox, typed: str) -> dict[str, set[str]]:
    """Each query of the words typed in `typed` form (NFC/NFD): the ids it returns."""
    f = nfc if typed == "NFC" else nfd
    out = {
        "subject": CheckFilter(subject=f("RÉSUMÉ")),
        "contains head": CheckFilter(contains=f("était crème")),
        "contains kept": CheckFilter(contains=f("crème brû")),
        "contains file": CheckFilter(contains=f("naïve")),
    }
    got = {name: {r.id for r in box.check(flt=flt)} for name, flt in out.items()}
    got["search"] = {r.id for r in box.search(f(r"café\b"))}
    got["search kept"] = {r.id for r in box.search(f("brûlée"))}
    got["search file"] = {r.id for r in box.search(f(r"\bnaïve fin"))}
    got["search rank"] = {r.id for r in box.search(f("crème"), rank=True)}
    return got


def _want(ids: dict[int, str]) -> dict[str, set[str]]:
    both = {k: {ids[k], ids[k + 10]} for k in (0, 1, 2)}
    return {
        "subject": both[0],
        "contains head": both[0],
        "contains kept": both[1],
        "contains file": both[2],
        "search": both[0],
        "search kept": both[1],
        "search file": both[2],
        "search rank": both[0] | both[1],
    }


@pytest.mark.parametrize("typed", ["NFC", "NFD"])
def test_either_form_finds_both_forms(box: Mailbox, typed: str) -> None:
    assert _answers(box, typed) == _want(_ids(box))


@pytest.mark.parametrize("typed", ["NFC", "NFD"])
def test_a_sender_in_either_form(tmp_path: Path, typed: str) -> None:
    """`--from` on a non-ASCII address (as an SMTPUTF8 or IMAP source may give it; the
    header parser of plain 8-bit mail does not) stored in each form."""
    index = index_module.MailIndex(tmp_path / "index.sqlite3")
    for k, form in enumerate((nfc, nfd)):
        info = Interpretation(
            message_id=f"<s{k}@x.test>",
            from_addr=form("Zoë@Été.test"),
            to_addrs=[ME],
            subject="hello",
            header_date=None,
            in_reply_to=None,
            references=[],
            body="hi",
            protocol_type=None,
        )
        index.add(f"{k:012x}", "inbox", f"name{k}", info, [], ts=1.7e9 + k, file=f"new/name{k}")
    f = nfc if typed == "NFC" else nfd
    got = [r.id for r, _ in index.check("inbox", CheckFilter(from_=f("zoë@été")))]
    assert got == ["000000000001", "000000000000"]
    assert [r.id for r, _ in index.check("inbox", CheckFilter(from_="zoe@ete"))] == []  # diacritics count
    index.close()


def test_records_keep_their_stored_form(box: Mailbox) -> None:
    """Only the comparisons are in NFC: what a message says is returned as it was stored."""
    ids = _ids(box)
    assert box.get(ids[10]).subject == nfd("Résumé du café") != nfc("Résumé du café")
    assert box.get(ids[0]).subject == nfc("Résumé du café")


def test_full_text_rowids_are_minus_seq_and_one_batch_writes_in_order(box: Mailbox) -> None:
    db = box._index.db
    rng = range(600)  # more than PENDING_CAP in one transaction: written in sorted chunks
    with box._index.batch():
        for k in rng:
            box.deliver(_mail(100 + k, "peer@b.test", f"batch {k}", f"word{k % 7} common"))
    seqs = {r[0] for r in db.execute("SELECT seq FROM messages")}
    rowids = {r[0] for r in db.execute("SELECT id FROM messages_fts_docsize")}
    assert rowids == {-s for s in seqs}
    got = [r.subject for r in box.check(flt=CheckFilter(contains="word3", n=1000))]
    assert got == [f"batch {k}" for k in reversed(rng) if k % 7 == 3]  # newest first, every one
    got = [r.subject for r in box.check(flt=CheckFilter(contains="word3", n=5, sort="oldest"))]
    assert got == [f"batch {k}" for k in rng if k % 7 == 3][:5]


def test_a_rolled_back_batch_leaves_no_full_text_rows(box: Mailbox) -> None:
    db = box._index.db
    before = db.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0]
    with pytest.raises(RuntimeError), box._index.batch():
        for k in range(3):
            box.deliver(_mail(900 + k, "peer@b.test", "gone", "vanishing words"))
        raise RuntimeError("interrupted")
    assert db.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == before
    assert box.check(flt=CheckFilter(contains="vanishing")) == []
    box.deliver(_mail(999, "peer@b.test", "kept", "vanishing words"))  # the next batch starts clean
    assert [r.subject for r in box.check(flt=CheckFilter(contains="vanishing"))] == ["kept"]


def _as_v4(box: Mailbox) -> None:
    """Turn the index into what v4 wrote: full-text rowids `seq`, a removed message's row
    left behind, header columns lowercased without NFC."""
    db = box._index.db
    rows = [
        (int(r[0]), r[1], r[2], box.get(r[3]).body)
        for r in db.execute("SELECT seq, from_addr, subject, id FROM messages ORDER BY seq")
    ]
    with box._index.batch():
        db.execute("DROP TABLE messages_fts")
        db.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(from_addr, subject, body, content='')")
        db.executemany("INSERT INTO messages_fts (rowid, from_addr, subject, body) VALUES (?, ?, ?, ?)", rows)
        db.execute(  # a removed message's row (v4 could not delete it), with a word of its own
            "INSERT INTO messages_fts (rowid, from_addr, subject, body)"
            " VALUES (100000, 'x@y.test', 'gone', 'zzremoved')"
        )
        db.execute("INSERT OR IGNORE INTO terms (term) VALUES ('zzremoved')")
        for seq, frm, subject, _ in rows:
            db.execute(
                "UPDATE messages SET from_lc = ?, subject_lc = ? WHERE seq = ?",
                (frm.lower(), subject.lower(), seq),
            )
        db.execute("PRAGMA user_version = 4")
        db.execute("DROP TABLE ep_versions")  # v4 knew nothing of the one migrator


def test_a_v4_index_is_upgraded(box: Mailbox, tmp_path: Path) -> None:
    ids = _ids(box)
    seq_of = dict(box._index.db.execute("SELECT id, seq FROM messages").fetchall())
    ranked = [r.id for r in box.search(nfd("crème"), rank=True)]
    _as_v4(box)
    v4 = box._index.db
    assert v4.execute("SELECT min(id) FROM messages_fts_docsize").fetchone()[0] > 0
    # v4's stored lowercase: its prefilter missed an NFD subject for an NFC filter.
    hits = v4.execute("SELECT id FROM messages WHERE instr(subject_lc, ?) > 0", (nfc("résumé"),)).fetchall()
    assert [r[0] for r in hits] == [ids[0]]
    box.close()
    with Mailbox(tmp_path / "agent", address=ME) as again:
        db = again._index.db
        assert db.execute("PRAGMA user_version").fetchone()[0] == index_module._VERSION == 5
        rowids = {r[0] for r in db.execute("SELECT id FROM messages_fts_docsize")}
        assert rowids == {-s for s in seq_of.values()}  # the removed message's row is gone
        assert dict(db.execute("SELECT id, seq FROM messages").fetchall()) == seq_of  # nothing re-keyed
        db.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, messages_fts, row)")
        ours = {r[0] for r in db.execute("SELECT term FROM terms")}
        assert ours == {r[0] for r in db.execute("SELECT term FROM temp.v")} and "zzremoved" not in ours
        assert "naive" in ours  # the body past TEXT_CAP was read from its file
        for typed in ("NFC", "NFD"):
            assert _answers(again, typed) == _want(ids), typed
        assert [r.id for r in again.search(nfd("crème"), rank=True)] == ranked
    box._index = again._index  # closed with the fixture (a closed connection closes again quietly)


# ------------------------------------------------- the v4 upgrade in steps (resumable)
def _v5_state(db: sqlite3.Connection) -> tuple[set[int], set[str], dict[str, int], list[tuple[str, str]]]:
    """What the upgrade must leave: full-text rowids, vocabulary, ids' seqs, folded columns."""
    db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, messages_fts, row)")
    try:
        return (
            {r[0] for r in db.execute("SELECT id FROM messages_fts_docsize")},
            {r[0] for r in db.execute("SELECT term FROM terms")},
            dict(db.execute("SELECT id, seq FROM messages").fetchall()),
            db.execute("SELECT from_lc, subject_lc FROM messages ORDER BY seq").fetchall(),
        )
    finally:
        db.execute("DROP TABLE temp.v")


def _v4_and_a_copy(box: Mailbox, tmp_path: Path) -> tuple[Path, Path]:
    """The fixture's mailbox as v4 left it, closed, and a copy of it: (agent, copy)."""
    _as_v4(box)
    box.close()
    agent, copy = tmp_path / "agent", tmp_path / "v4-copy"
    shutil.copytree(agent, copy)
    return agent, copy


def test_an_interrupted_v4_upgrade_resumes_where_it_stopped(
    box: Mailbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of 3 messages; Ctrl-C after the first committed step, then an exception inside
    the second (a file read failing mid-step): each open keeps what was committed, the
    version stays 4 until the last step, and the finished index is the one an uninterrupted
    upgrade writes."""
    from envelopay.mail.mailbox import index_upgrade

    monkeypatch.setattr(index_upgrade, "STEP", 3)
    ids = _ids(box)
    agent, pristine = _v4_and_a_copy(box, tmp_path)

    seen: list[tuple[int, int]] = []

    def stop_after_first(done: int, total: int) -> None:
        seen.append((done, total))
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        Mailbox(agent, address=ME, progress=stop_after_first)
    assert seen == [(3, 8)]
    db = sqlite3.connect(agent / "mailbox" / "index.sqlite3")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 4
    assert db.execute("SELECT seq, done FROM upgrade_cursor").fetchone()[1] == 3
    assert db.execute("SELECT count(*) FROM messages_fts_next_docsize").fetchone()[0] == 3
    db.close()

    def failing_body_of(*_a: object) -> str:
        raise OSError("disk went away")

    with monkeypatch.context() as m:  # the second step reads the long body's file: it fails inside
        m.setattr(Mailbox, "_body_of", failing_body_of)
        with pytest.raises(OSError):
            Mailbox(agent, address=ME)
    db = sqlite3.connect(agent / "mailbox" / "index.sqlite3")
    assert db.execute("SELECT done FROM upgrade_cursor").fetchone()[0] == 3  # the failed step left nothing
    db.close()

    steps: list[tuple[int, int]] = []
    with Mailbox(agent, address=ME, progress=lambda d, t: steps.append((d, t))) as again:
        assert steps == [(6, 8), (8, 8)]
        db = again._index.db
        assert db.execute("PRAGMA user_version").fetchone()[0] == 5
        scaffolding = "SELECT 1 FROM sqlite_master WHERE name LIKE '%next%' OR name = 'upgrade_cursor'"
        assert not db.execute(scaffolding).fetchall()
        for typed in ("NFC", "NFD"):
            assert _answers(again, typed) == _want(ids), typed
        resumed = _v5_state(db)
    with Mailbox(pristine, address=ME) as whole:  # the same v4 index, upgraded in one go
        assert _v5_state(whole._index.db) == resumed
    assert "zzremoved" not in resumed[1] and "naive" in resumed[1]


def test_the_upgrade_reports_progress_on_a_terminal(tmp_path: Path) -> None:
    from envelopay.mail.mailbox.scan import terminal_progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    show = terminal_progress(out, what="upgrading the mailbox index")
    assert show is not None and terminal_progress(io.StringIO()) is None  # a pipe hears nothing
    show(2000, 4000)
    show(4000, 4000)
    assert out.getvalue() == (
        "\rupgrading the mailbox index: 2000/4000 messages (Ctrl-C resumes next time)"
        "\rupgrading the mailbox index: 4000/4000 messages (Ctrl-C resumes next time)\n"
    )


_UPGRADER = """
import sys, time
from pathlib import Path
from envelopay.mail.mailbox import Mailbox, index_upgrade
index_upgrade.STEP = 10
def step(done, total):
    print(done, total, flush=True)
    time.sleep(30)  # killed here, between committed steps (or the test times out)
Mailbox(Path(sys.argv[1]), address=sys.argv[2], progress=step)
"""


def test_a_killed_v4_upgrade_resumes(tmp_path: Path) -> None:
    """SIGKILL after the first committed step of an upgrade in another process: the next
    open finishes it, with the index an uninterrupted upgrade writes."""
    agent = tmp_path / "agent"
    with Mailbox(agent, address=ME, duplicate_window=None) as b:
        for k in range(45):
            b.deliver(_mail(k, f"p{k % 4}@b.test", nfd(f"Café {k}"), f"word{k} " + nfc("crème ") * (k % 3)))
        _as_v4(b)
    pristine = tmp_path / "pristine"
    shutil.copytree(agent, pristine)
    proc = subprocess.Popen(
        [sys.executable, "-c", _UPGRADER, str(agent), ME], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["10", "45"]
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with Mailbox(agent, address=ME) as again, Mailbox(pristine, address=ME) as whole:
        assert _v5_state(again._index.db) == _v5_state(whole._index.db)
        ranked = [r.id for r in whole.search("crème", rank=True)]
        assert [r.id for r in again.search("crème", rank=True)] == ranked
        assert len(again.check(flt=CheckFilter(subject="café", n=100))) == 45


@pytest.mark.parametrize("step", [1, 4, 8, 9])
def test_the_v4_upgrade_ends_the_same_whatever_its_step(
    box: Mailbox, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    """8 messages in steps of 1, 4 (a step ends exactly at the last message), 8 and 9: the
    same index as one pass, the new table swapped in, no scaffolding left behind."""
    from envelopay.mail.mailbox import index_upgrade

    ids = _ids(box)
    agent, one_pass = _v4_and_a_copy(box, tmp_path)
    with Mailbox(one_pass, address=ME) as whole:
        want = _v5_state(whole._index.db)
    monkeypatch.setattr(index_upgrade, "STEP", step)
    steps: list[tuple[int, int]] = []
    with Mailbox(agent, address=ME, progress=lambda d, t: steps.append((d, t))) as again:
        db = again._index.db
        assert _v5_state(db) == want
        assert {-r[0] for r in db.execute("SELECT id FROM messages_fts_docsize")} == set(want[2].values())
        scaffolding = "SELECT name FROM sqlite_master WHERE name LIKE '%next%' OR name = 'upgrade_cursor'"
        assert db.execute(scaffolding).fetchall() == []
        assert _answers(again, "NFC") == _want(ids)
    assert steps[-1] == (8, 8) and len(steps) == -(-8 // step)
