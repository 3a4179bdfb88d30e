"""The OFFER counter-payment book in the ledger (envelopay.ledger.counterpay), on SQLite
and PostgreSQL: a payment begun by one process is seen by every other (on PostgreSQL, by
every host), so a redo anywhere never pays twice; rows an earlier version kept in a file
beside the ledger are taken in once."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

from envelopay.ledger.counterpay import CounterPayBook
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.worker.counterpay import CounterPayments, take_in_file

ME = "worker@garden.local"
PEER = "buyer@garden.local"
ACCEPT = {"type": "accept", "id": "acc_1", "proof": {"tx": "0x" + "ab" * 32}}


def _now() -> datetime:
    return datetime.now(UTC)


def _twin(store: Store) -> Store:
    """The same ledger through a connection of its own: another process, another host."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path)
    assert isinstance(store, PostgresStore)
    return PostgresStore(store.dsn, max_size=2)


def test_a_payment_begun_anywhere_is_never_begun_again(store: Store) -> None:
    here = CounterPayBook(store, local=ME, clock=_now)
    other_store = _twin(store)
    try:
        there = CounterPayBook(other_store, local=ME, clock=_now)
        assert here.begin(PEER, "of-1") == ("new", None)
        # Begun and never recorded (the process died during the payment): in doubt there.
        assert there.begin(PEER, "of-1") == ("in_doubt", None)
        here.paid(PEER, "of-1", ACCEPT)
        assert there.begin(PEER, "of-1") == ("paid", ACCEPT)  # the same ACCEPT, same proof
        # A refusal that moved nothing forgets the attempt; a paid one is never forgotten.
        assert there.begin(PEER, "of-2") == ("new", None)
        there.failed(PEER, "of-2")
        here.failed(PEER, "of-1")
        assert here.begin(PEER, "of-2") == ("new", None)
        assert here.begin(PEER, "of-1") == ("paid", ACCEPT)
        # Another address on the same ledger keeps its own book.
        elsewhere = CounterPayBook(store, local="other@garden.local", clock=_now)
        assert elsewhere.begin(PEER, "of-1") == ("new", None)
    finally:
        other_store.close()


def test_two_processes_beginning_at_once_begin_once(store: Store) -> None:
    stores = [_twin(store) for _ in range(4)]
    try:
        books = [CounterPayBook(s, local=ME, clock=_now) for s in stores]
        said: list[str] = []
        start = threading.Barrier(len(books))

        def ask(book: CounterPayBook) -> None:
            start.wait()
            said.append(book.begin(PEER, "of-race")[0])

        threads = [threading.Thread(target=ask, args=(b,)) for b in books]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert sorted(said) == ["in_doubt"] * 3 + ["new"]
    finally:
        for s in stores:
            s.close()


def test_an_earlier_versions_file_is_taken_in_once(store: Store, tmp_path: Path) -> None:
    file = tmp_path / "agent.offers.db"
    old = CounterPayments(file)
    assert old.begin(PEER, "of-paid")[0] == "new"
    old.paid(PEER, "of-paid", ACCEPT)
    assert old.begin(PEER, "of-doubt")[0] == "new"  # begun, outcome never recorded
    assert old.begin(PEER, "of-here")[0] == "new"
    old.close()
    book = CounterPayBook(store, local=ME, clock=_now)
    assert book.begin(PEER, "of-here") == ("new", None)
    book.paid(PEER, "of-here", {**ACCEPT, "id": "acc_newer"})  # the ledger's row is newer
    assert take_in_file(book, file) == 2
    assert not file.exists() and (tmp_path / "agent.offers.db.taken-in").exists()
    assert book.begin(PEER, "of-paid") == ("paid", ACCEPT)
    assert book.begin(PEER, "of-doubt") == ("in_doubt", None)  # never paid twice after the upgrade
    assert book.begin(PEER, "of-here") == ("paid", {**ACCEPT, "id": "acc_newer"})
    assert take_in_file(book, file) == 0  # taken in: not read again


def test_a_file_without_the_table_adds_nothing(store: Store, tmp_path: Path) -> None:
    file = tmp_path / "empty.offers.db"
    sqlite3.connect(str(file)).close()
    assert take_in_file(CounterPayBook(store, local=ME, clock=_now), file) == 0
