"""Waiting messages in the ledger, on SQLite and PostgreSQL: a waiting message stays
claimed with its proof held, expires its lease so any worker can take it over, survives
reopening the store, is taken once when due, and is skipped once the message is done."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Claim, Commit, ProofKey
from envelopay.ledger.waiting import WaitingMessage, WaitingStore
from envelopay.testing.store import T0

LEASE = timedelta(seconds=60)


@pytest.fixture(params=["sqlite", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    made: list[SqliteStore | PostgresStore] = []

    def open_store() -> SqliteStore | PostgresStore:
        if request.param == "sqlite":
            store: SqliteStore | PostgresStore = SqliteStore(tmp_path / "ledger.db")
        else:
            store = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=2)
        made.append(store)
        return store

    yield open_store
    for store in made:
        store.close()


def claim(local: str, worker: str, now: object = T0) -> Claim:
    return Claim(local, "<pay@peer>", "h", worker, now, now + LEASE,  # type: ignore[operator, arg-type]
                 sender="peer@x.test", protocol_id="pay-1", proof=ProofKey("solana-local", "SIG"))


def test_a_waiting_message_lifecycle(reopen: object) -> None:
    open_store = reopen  # type: ignore[assignment]
    local = f"w-{secrets.token_hex(3)}@x.test"
    s = open_store()  # type: ignore[operator]
    assert isinstance(s, WaitingStore)
    assert s.begin_step(claim(local, "a")).status == "new"
    d = WaitingMessage(local, "<pay@peer>", b"raw \xff bytes\r\n", T0, T0 + timedelta(seconds=1),
                 T0 + timedelta(seconds=60), 1, "pending", "1 of 2 confirmations")
    assert s.waiting_put(d, worker="a", now=T0)
    assert s.waiting_put(d, worker="b", now=T0) is False  # not b's claim
    assert s.proof_status(ProofKey("solana-local", "SIG")) == "held"  # neither spent nor released
    # The lease expired at deferral: another worker (or this one after a restart) may take over.
    assert s.begin_step(claim(local, "b", T0 + timedelta(seconds=1))).status == "new"

    s2 = open_store()  # type: ignore[operator]
    kept = s2.waiting_get(local, "<pay@peer>")
    assert kept == d
    assert s2.waiting_count(local) == 1
    assert s2.waiting_take(local, T0, T0 + timedelta(seconds=5)) == []  # not due yet
    due = T0 + timedelta(seconds=2)
    [taken] = s2.waiting_take(local, due, due + timedelta(seconds=5))
    assert taken.raw == d.raw and taken.attempts == 1
    assert s.waiting_take(local, due, due + timedelta(seconds=5)) == []  # taken once
    # Updating keeps first_seen and deadline, moves next_at and the counters.
    later = WaitingMessage(local, "<pay@peer>", d.raw, due, due + timedelta(seconds=2), due, 2, "unavailable",
                     "down")
    assert s.begin_step(claim(local, "b", due)).status == "new"
    assert s.waiting_put(later, worker="b", now=due)
    again = s.waiting_get(local, "<pay@peer>")
    assert again is not None and (again.first_seen, again.deadline) == (T0, d.deadline)
    assert (again.attempts, again.last_status, again.next_at) == (2, "unavailable", later.next_at)

    assert s.begin_step(claim(local, "b", due)).status == "new"
    assert s.commit_step(Commit(local, due, {"status": "processed"}, message_id="<pay@peer>", worker="b",
                                proof=ProofKey("solana-local", "SIG"), proof_fate="spend",
                                sender="peer@x.test", protocol_id="pay-1", replay_fate="done")) == "ok"
    far = T0 + timedelta(hours=1)
    assert s.waiting_take(local, far, far) == []  # the message is done: skipped
    assert s.waiting_count(local) == 0
    s.waiting_clear(local, "<pay@peer>")
    assert s.waiting_get(local, "<pay@peer>") is None
