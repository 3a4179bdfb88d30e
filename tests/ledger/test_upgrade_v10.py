"""Schema v10 on both backends: a v9 ledger with rows (verdicts on spent proofs, v9's
per-flow summary rows) upgrades in place, keeps its meaning, passes the store kit, and
compaction then leaves the smallest form without letting any replay through."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.ledger._sql import SqlStore
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.retention import compact_ledger
from envelopay.ledger.schema import LATEST
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Claim, ProofKey, Store
from envelopay.testing.fill import LOCAL, fill_ledger
from envelopay.testing.store import CHECKS, check_store

LATER = datetime(2027, 6, 1, tzinfo=UTC)
HASH = "a" * 64  # the content hash fill_ledger records for every pair


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[bool], SqlStore]]:
    made: list[SqlStore] = []
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else ""

    def open_(migrate: bool) -> SqlStore:
        s: SqlStore
        if request.param == "sqlite":
            s = SqliteStore(tmp_path / "ledger.db", migrate=migrate)
        else:
            s = PostgresStore(dsn, max_size=2, migrate=migrate)
        made.append(s)
        return s

    yield open_
    for s in made:
        s.close()  # type: ignore[attr-defined]


def _v9_ledger(old: SqlStore) -> None:
    assert old.migrate(target=9) == 9  # type: ignore[call-arg]
    fill_ledger(old, 40)
    with old.write() as x:  # what v9 wrote: a verdict on each spent proof, summary rows
        x.exec("UPDATE ep_proofs SET verdict = ?", (old.j({"status": "valid", "amount": "1.00"}),))
        x.many(
            "INSERT INTO ep_flow_summary (flow_id, messages, compacted_at) VALUES (?, ?, ?)",
            [(f"f{i}", 3, old.t(LATER)) for i in (1, 2)],
        )


def _one(store: SqlStore, sql: str) -> object:
    with store.read() as x:
        row = x.one(sql)
    assert row is not None
    return row[0]


def _claim(mid: str, pid: str, key: str, content: str = HASH) -> Claim:
    return Claim(LOCAL, mid, content, "w9", LATER, LATER + timedelta(minutes=5),
                 sender=f"buyer{pid.lstrip('p')}@fill.test", protocol_id=pid, proof=ProofKey("solana", key))


def test_v9_ledger_upgrades_then_compacts(opener: Callable[[bool], SqlStore]) -> None:
    _v9_ledger(opener(False))
    new = opener(True)  # opening migrates, as a restarted worker does
    assert new.version() == LATEST  # type: ignore[attr-defined]
    assert _one(new, "SELECT count(*) FROM ep_flows WHERE compacted = 3") == 2  # the summary, folded
    with new.read() as x, pytest.raises(Exception, match="ep_flow_summary"):
        x.one("SELECT count(*) FROM ep_flow_summary")
    # Before compaction, the upgraded rows answer as they did.
    assert new.begin_step(_claim("<x1@fill.test>", "p7", "k-new")).status == "retransmission"
    assert new.begin_step(_claim("<x2@fill.test>", "p8", "k-n2", "b" * 64)).status == "duplicate_id"

    report = compact_ledger(new, older_than=timedelta(days=30), now=LATER)
    assert report.flows == 40 and report.trimmed["ep_proofs"] == 40 and report.trimmed["ep_replay"] == 40
    assert _one(new, "SELECT count(*) FROM ep_proofs WHERE verdict IS NOT NULL") == 0
    assert _one(new, "SELECT count(*) FROM ep_flows WHERE compacted = 5") == 2  # 3 before + 2 now

    # After compaction every replay is still refused: a reused id with other content, a
    # retransmission (answered with the original claim's outcome), a spent proof.
    assert new.begin_step(_claim("<x3@fill.test>", "p17", "k-n3", "b" * 64)).status == "duplicate_id"
    again = new.begin_step(_claim("<x4@fill.test>", "p17", "k-n4"))
    assert again.status == "retransmission" and again.requeued == ()
    assert again.outcome == {"status": "processed", "flow_id": "f17"}
    assert new.begin_step(_claim("<x5@fill.test>", "p-new", "k17")).status == "proof_replayed"
    assert new.begin_step(_claim("<in17@fill.test>", "p17", "k17")).status == "seen"
    assert new.proof_status(ProofKey("solana", "k3")) == "spent"


def test_upgraded_ledger_passes_the_store_kit(opener: Callable[[bool], SqlStore]) -> None:
    _v9_ledger(opener(False))
    made = itertools.count()

    def factory() -> Store:
        next(made)
        return opener(True)

    assert check_store(factory) == [c.__name__ for c in CHECKS]


def test_a_spend_records_no_verdict(opener: Callable[[bool], SqlStore]) -> None:
    # The verdict lives in the flow log (it ages out with it); the proof row keeps the key.
    from tests.ledger.test_retention import _step

    store = opener(True)
    _step(store, "<v1@real.test>", 1)
    assert _one(store, "SELECT count(*) FROM ep_proofs WHERE status = 'spent' AND verdict IS NULL") == 1
    assert store.flow_log("real-1")[0].type == "order"


def test_upgrade_runs_beside_a_live_worker(opener: Callable[[bool], SqlStore]) -> None:
    # A worker still on the v9 schema keeps stepping while another process opens the
    # ledger (and so migrates it): no step fails, and every step it made is there.
    import threading

    from tests.ledger.test_retention import _step

    worker = opener(False)
    _v9_ledger(worker)
    errors: list[BaseException] = []
    started = threading.Event()

    def live() -> None:
        try:
            for n in range(200, 260):
                _step(worker, f"<live{n}@real.test>", n, at=LATER)
                started.set()
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
            started.set()

    t = threading.Thread(target=live)
    t.start()
    started.wait(timeout=60)
    new = opener(True)
    t.join()
    assert errors == []
    assert new.version() == LATEST  # type: ignore[attr-defined]
    assert len(new.list_flows(LOCAL, 100)) == 100 and new.get_flow("real-259") is not None
    assert new.begin_step(_claim("<x9@fill.test>", "p17", "k-n9", "b" * 64)).status == "duplicate_id"
