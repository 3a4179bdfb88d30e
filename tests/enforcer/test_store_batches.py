"""EnforcerStore.transaction on both backends: one commit for a batch, all or nothing when
rows are required; and the SQLite store's WAL checkpoints off the event loop's thread."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from envelopay.enforcer.common.sqlite_wal import BACKSTOP_PAGES, Checkpointer
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.errors import StoreError

_TAKE = (
    "INSERT INTO enf_counters (agent_id, win, slot, sends) VALUES (?, 'h', 's', 1)"
    " ON CONFLICT (agent_id, win, slot) DO UPDATE SET sends = enf_counters.sends + 1"
    " WHERE enf_counters.sends < ? RETURNING sends"
)


async def _counters(store: EnforcerStore) -> dict[str, int]:
    rows = await store.execute_sql("SELECT agent_id, sends FROM enf_counters", ())
    return {str(r[0]): int(r[1]) for r in rows}


async def test_a_required_batch_commits_whole_or_not_at_all(store: EnforcerStore) -> None:
    ok = await store.transaction([(_TAKE, ("a", 2)), (_TAKE, ("b", 1))], require_rows=True)
    assert ok.committed and ok.rows == [[(1,)], [(1,)]]
    # "b" is full: the batch stops there and "a"'s increment is rolled back with it.
    refused = await store.transaction(
        [(_TAKE, ("a", 2)), (_TAKE, ("b", 1)), (_TAKE, ("c", 5))], require_rows=True, durable=False
    )
    assert refused.refused_at == 1 and not refused.committed and refused.rows == [[(2,)]]
    assert await _counters(store) == {"a": 1, "b": 1}


async def test_a_free_batch_commits_empty_results_and_a_fault_rolls_back(store: EnforcerStore) -> None:
    free = await store.transaction([(_TAKE, ("a", 1)), (_TAKE, ("a", 1))], durable=False)
    assert free.committed and free.rows == [[(1,)], []]
    with pytest.raises(StoreError):
        await store.transaction([(_TAKE, ("z", 9)), ("SELECT * FROM enf_no_such_table", ())])
    assert await _counters(store) == {"a": 1}
    # The store is usable after the fault (the connection went back clean).
    assert (await store.transaction([(_TAKE, ("z", 9))])).rows == [[(1,)]]


async def test_sqlite_checkpoints_in_a_thread_of_its_own(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    try:
        assert (await store.execute_sql("PRAGMA wal_autocheckpoint", ()))[0][0] == BACKSTOP_PAGES
        assert store._checkpointer is not None and store._checkpointer._thread.is_alive()
        for n in range(50):
            await store.transaction([(_TAKE, (f"a{n}", 5))])
        # The thread's own step, run here once: every WAL frame reaches the database.
        conn = sqlite3.connect(tmp_path / "enf.db")
        try:
            busy, frames, done = store._checkpointer.checkpoint(conn)
        finally:
            conn.close()
        assert busy == 0 and frames > 0 and done == frames
    finally:
        await store.close()
    assert store._checkpointer is None


def test_a_checkpointer_stops_on_request(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "x.db").execute("PRAGMA journal_mode=WAL").fetchall()
    cp = Checkpointer(str(tmp_path / "x.db"), interval=0.01)
    cp.stop()
    assert not cp._thread.is_alive()
