"""`check_mailbox_store(factory)`: the agent mailbox's index (envelopay.mail.mailbox.index,
`MailIndex`, SQLite only) and its send log (guard, `SendGuard`) as a public kit, as
`check_store` is for the ledger. Every method is exercised, with the guarantees the
mailbox rests on: one row per Maildir name (a second add of it is refused), a batch is one
transaction (an error inside leaves nothing), a refiled message takes the next place in
date order, threads merge when a message links them, and a duplicate send is refused
within the window and forgotten only after it.

    from envelopay.testing.mailbox_store import check_mailbox_store
    check_mailbox_store(lambda: MailIndex(tmp_path / f"{uuid4().hex}.sqlite"))

`factory` returns a new, empty index; it is called once per check and closed after it.
A failed check raises AssertionError naming it; the names of those that passed are returned.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from envelopay.errors import EnvelopayError
from envelopay.mail.mailbox.guard import SendGuard
from envelopay.mail.mailbox.index import HEAD, MailIndex
from envelopay.mail.mailbox.inputs import MailboxError
from envelopay.mail.mailbox.interpret import Interpretation
from envelopay.mail.mailbox.records import Attachment, CheckFilter
from envelopay.testing.kit import run_checks

__all__ = ["MAILBOX_CHECKS", "check_mailbox_store"]

Factory = Callable[[], MailIndex]
T0 = 1_800_000_000.0
_seq = itertools.count(1)


def _info(n: int, *, subject: str = "", body: str = "", irt: str | None = None,
          refs: tuple[str, ...] = (), sender: str = "alice@box.test") -> Interpretation:
    return Interpretation(
        message_id=f"<m{n}@box.test>", from_addr=sender, to_addrs=["me@box.test"],
        subject=subject or f"hello {n}",
        header_date="Tue, 1 Jan 2027 00:00:00 +0000", in_reply_to=irt, references=list(refs),
        body=body or f"plain words number{n}", protocol_type=None,
    )


def _add(ix: MailIndex, n: int, folder: str = "inbox", ts: float | None = None, **kw: object) -> str:
    mid = f"id{n}-{next(_seq)}"
    info = _info(n, **kw)  # type: ignore[arg-type]
    at = T0 + n if ts is None else ts
    added = ix.add(mid, folder, f"name{mid}", info, [], ts=at, file=f"new/name{mid}")
    assert added, mid
    return mid


def check_add_and_read(factory: Factory) -> None:
    ix = factory()
    try:
        long_body = "start " + "x" * (HEAD * 3) + " finish"
        mid = _add(ix, 1, body=long_body)
        name = f"name{mid}"
        again = ix.add("other", "inbox", name, _info(9), [], ts=T0, file=f"new/{name}")
        assert not again, "one row per Maildir name"
        got = ix.get(mid)
        assert got is not None and got.subject == "hello 1" and got.from_addr == "alice@box.test"
        assert got.to_addrs == ("me@box.test",) and got.message_id == "<m1@box.test>" and not got.read
        assert got.date == datetime.fromtimestamp(T0 + 1, UTC) and not got.body_complete
        assert ix.text(mid) == long_body, "the whole text, head and kept rest"
        assert ix.by_name(name) == ix.get(mid)
        assert ix.location(mid) == ("inbox", name, f"new/{name}")
        assert ix.files_by_name([name, "missing"]) == {name: (mid, f"new/{name}")}
        assert ix.get("missing") is None and ix.by_name("missing") is None and ix.text("missing") is None
        att = Attachment("a.json", "application/json", 12)
        sent = ix.add("sent1", "sent", "namesent1", _info(2), [att], ts=T0 + 2, file="cur/namesent1:2,S")
        assert sent
        record = ix.get("sent1")
        assert record is not None and record.read and record.attachments == (att,), "our own mail is read"
    finally:
        ix.close()


def check_batch_is_one_transaction(factory: Factory) -> None:
    ix = factory()
    try:
        kept = _add(ix, 1)
        try:
            with ix.batch():
                _add(ix, 2)
                with ix.batch():  # nested: the outer one
                    _add(ix, 3)
                raise EnvelopayError("stop")
        except EnvelopayError:
            pass
        assert [r.id for r in ix.search(None, ["inbox"], truncate=0, rank=False)] == [kept]
    finally:
        ix.close()


def check_threads(factory: Factory) -> None:
    ix = factory()
    try:
        a = _add(ix, 1)
        b = _add(ix, 2, irt="<m1@box.test>", refs=("<m1@box.test>",))
        c = _add(ix, 3)  # a thread of its own
        assert [r.id for r in ix.thread(b, 0)] == [a, b]
        d = _add(ix, 4, refs=("<m2@box.test>", "<m3@box.test>"))  # links both: they merge
        assert [r.id for r in ix.thread(c, 0)] == [a, b, c, d]
        threads = list(ix.recent_threads())
        assert len(threads) == 1, threads
        assert [r.id for r in ix.thread_rows(threads[0])] == [a, b, c, d]
    finally:
        ix.close()


def check_check_and_search(factory: Factory) -> None:
    ix = factory()
    try:
        a = _add(ix, 1, subject="Invoice for March", sender="billing@shop.test")
        b = _add(ix, 2, body="the quarterly invoice is attached")
        c = _add(ix, 3, subject="lunch")
        newest = [r.id for r, _ in ix.check("inbox", CheckFilter(n=10))]
        assert newest == [c, b, a]
        assert [r.id for r, _ in ix.check("inbox", CheckFilter(n=10, sort="oldest"))] == [a, b, c]
        assert [r.id for r, _ in ix.check("inbox", CheckFilter(from_="billing"))] == [a]
        assert [r.id for r, _ in ix.check("inbox", CheckFilter(subject="invoice"))] == [a]
        found = [(r.id, exact) for r, exact in ix.check("inbox", CheckFilter(contains="invoice"))]
        assert found == [(b, True), (a, True)], found  # the subject is text too
        assert [r.id for r, _ in ix.check("inbox", CheckFilter(n=1))] == [c], "the limit"
        assert [r.id for r in ix.search('"invoice"', ["inbox"], truncate=0, rank=False)] == [b, a]
        ranked = {r.id for r in ix.search('"invoice"', ["inbox"], truncate=0, rank=True)}
        assert ranked == {a, b}
        assert list(ix.search('"invoice"', ["sent"], truncate=0, rank=False)) == []
        assert ix.expander()("quarter") == ["quarterly"], "a prefix is the whole tokens it covers"
        assert ix.mark_read([a, b]) == 2 and ix.mark_read([a]) == 0
        assert [r.id for r, _ in ix.check("inbox", CheckFilter(unread_only=True))] == [c]
    finally:
        ix.close()


def check_refile_move_remove(factory: Factory) -> None:
    ix = factory()
    try:
        a = _add(ix, 1)
        b = _add(ix, 2)
        ix.refile(a, "archive", read=True, file=f"cur/name{a}:2,S")
        got = ix.get(a)
        assert got is not None and got.folder == "archive" and got.read
        ix.refile(b, "sent", read=True, file=f"cur/name{b}:2,S", ts=T0 + 100)
        ix.refile(a, "sent", read=True, file=f"cur/name{a}:2,S", ts=T0 + 50)
        order = [r.id for r in ix.search(None, ["sent"], truncate=0, rank=False)]
        assert order == [a, b], "a refiled message takes the next place in date order"
        assert [r.id for r in ix.search('"plain"', ["sent"], truncate=0, rank=False)] == [a, b]
        ix.moved(a, f"cur/name{a}:2,RS")
        assert ix.location(a)[2] == f"cur/name{a}:2,RS"
        ix.remove(a)
        assert ix.get(a) is None
        assert [r.id for r in ix.search('"plain"', ["sent"], truncate=0, rank=False)] == [b]
    finally:
        ix.close()


def check_refresh_state(factory: Factory) -> None:
    ix = factory()
    try:
        assert ix.dir_mtime("inbox/new") is None
        ix.set_dir_mtime("inbox/new", 123)
        ix.set_dir_mtime("inbox/new", 456)
        assert ix.dir_mtime("inbox/new") == 456
    finally:
        ix.close()


def check_send_guard(factory: Factory) -> None:
    ix = factory()
    try:
        clock = [datetime.fromtimestamp(T0, UTC)]
        guard = SendGuard(ix.db, timedelta(minutes=10), lambda: clock[0])
        guard.refuse_duplicate("bob@x.test", "hi")
        guard.log(["bob@x.test"], "hi", "sent", "<s1@x>")
        guard.log(["carol@x.test"], "hi", "failed", "<s2@x>")
        try:
            guard.refuse_duplicate("BOB@x.test", "hi")
        except MailboxError as exc:
            assert exc.code == "duplicate_send", exc
        else:
            raise AssertionError("a duplicate within the window went through")
        guard.refuse_duplicate("carol@x.test", "hi")  # a failed send is no duplicate
        guard.refuse_duplicate("bob@x.test", "other body")
        clock[0] += timedelta(minutes=11)
        guard.refuse_duplicate("bob@x.test", "hi")
        assert guard.prune(T0 + 1) == 2 and guard.prune(T0 + 1) == 0
    finally:
        ix.close()


MAILBOX_CHECKS: tuple[Callable[[Factory], None], ...] = (
    check_add_and_read,
    check_batch_is_one_transaction,
    check_threads,
    check_check_and_search,
    check_refile_move_remove,
    check_refresh_state,
    check_send_guard,
)


def check_mailbox_store(factory: Factory) -> list[str]:
    """Run every mailbox index check against indexes made by `factory`; return their names."""
    return run_checks(MAILBOX_CHECKS, factory)
