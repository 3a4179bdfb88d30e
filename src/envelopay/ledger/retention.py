"""Ledger retention: what is kept forever in its smallest form, and what ages out.

Kept forever (they are what refuses replays; SPEC.md "Retention"):
- spent proof keys (`ep_proofs`): a proof spent once is refused for good;
- the (sender, id) pairs (`ep_replay`), with the body's hash: a reused id is refused, a
  retransmission is still recognised; when its flow is compacted the recorded outcome
  shrinks like a claim's (its outbox rows are gone: nothing is sent again);
- each inbound Message-ID claim (`ep_inbound`): a redelivered message is still `seen`;
  its outcome shrinks to its status, its lease and worker are cleared;
- the flow row (`ep_flows`: state, data, version), and a per-flow summary
  (`ep_flow_summary`: how many log entries were deleted, and when).

Aged out once older than the window the operator gives:
- outbox rows no longer pending (sent or failed), by `created_at`;
- for flows not updated within the window: their message log, Message-ID links and
  typed refs. A late message in such a flow no longer finds it (it is answered as an
  unknown ref, or starts a new flow): the window is also the flows' idle lifetime;
- settled calls of the email-as-tool client, by `resolved_at`.

Online: every batch is one short write transaction on the store's own connection, so
workers keep running beside it (SQLite: they wait at most one batch for the write lock;
PostgreSQL: only the compacted rows are locked). Each walk resumes from a cursor kept
in `ep_retention`, so a run costs what it removes, not the ledger's size. Deleted space
is reused by later writes (SQLite's free pages; PostgreSQL's VACUUM, which `vacuum=True`
runs, online, after the batches).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from envelopay.ledger._sql import Executor, SqlStore

__all__ = ["CompactReport", "compact_ledger", "ledger_bytes"]

_TABLES = ("ep_log", "ep_outbox", "ep_flow_msgids", "ep_flow_refs", "ep_inbound", "ep_calls")


@dataclass
class CompactReport:
    cutoff: datetime
    flows: int = 0  # flows compacted into a summary
    removed: dict[str, int] = field(default_factory=dict)
    trimmed: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "cutoff": self.cutoff.isoformat(),
            "flows": self.flows,
            "removed": dict(self.removed),
            "trimmed": dict(self.trimmed),
        }

    def _add(self, where: dict[str, int], table: str, n: int) -> None:
        where[table] = where.get(table, 0) + max(n, 0)


def _small(outcome: Any) -> dict[str, Any]:
    """An outcome's smallest form: its status and flow, marked compacted (`status` is
    what every reader of an outcome needs)."""
    doc = outcome if isinstance(outcome, dict) else {}
    out: dict[str, Any] = {"status": doc.get("status") or "compacted", "compacted": True}
    if isinstance(doc.get("flow_id"), str):
        out["flow_id"] = doc["flow_id"]
    return out


def _mark(x: Executor, name: str) -> list[str] | None:
    row = x.one("SELECT mark FROM ep_retention WHERE name = ?", (name,))
    return None if row is None else list(json.loads(row[0]))


def _set_mark(store: SqlStore, x: Executor, name: str, mark: Sequence[Any], now: datetime) -> None:
    x.exec(
        "INSERT INTO ep_retention (name, mark, at) VALUES (?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET mark = excluded.mark, at = excluded.at",
        (name, json.dumps([str(m) for m in mark]), store.t(now)),
    )


def _text_time(store: SqlStore, value: Any) -> str:
    return store.ut(value).isoformat()


def compact_ledger(
    store: SqlStore,
    *,
    older_than: timedelta,
    now: datetime,
    batch: int = 500,
    vacuum: bool = False,
    pause: Callable[[], None] | None = None,
) -> CompactReport:
    """Apply the retention rules to everything older than `now - older_than`.
    `pause` runs between batches (a sleep, to leave the write lock to workers)."""
    cutoff = now - older_than
    report = CompactReport(cutoff)
    steps = (_outbox, _flows, _calls, _inbound)
    for step in steps:
        while step(store, report, cutoff, now, batch):
            if pause is not None:
                pause()
    if vacuum:
        _vacuum(store)
    return report


def _outbox(store: SqlStore, r: CompactReport, cutoff: datetime, now: datetime, batch: int) -> bool:
    with store.write() as x:
        n = x.exec(
            "DELETE FROM ep_outbox WHERE seq IN (SELECT seq FROM ep_outbox WHERE status <> 'pending'"
            " AND created_at < ? ORDER BY created_at, seq LIMIT ?)",
            (store.t(cutoff), batch),
        )
    r._add(r.removed, "ep_outbox", n)
    return n >= batch


def _calls(store: SqlStore, r: CompactReport, cutoff: datetime, now: datetime, batch: int) -> bool:
    with store.write() as x:
        n = x.exec(
            "DELETE FROM ep_calls WHERE call_id IN (SELECT call_id FROM ep_calls WHERE status <> 'pending'"
            " AND resolved_at < ? ORDER BY resolved_at, call_id LIMIT ?)",
            (store.t(cutoff), batch),
        )
    r._add(r.removed, "ep_calls", n)
    return n >= batch


def _flows(store: SqlStore, r: CompactReport, cutoff: datetime, now: datetime, batch: int) -> bool:
    with store.write() as x:
        mark = _mark(x, "flows")
        sql = "SELECT flow_id, updated_at FROM ep_flows WHERE updated_at < ?"
        args: list[Any] = [store.t(cutoff)]
        if mark is not None:
            sql += " AND (updated_at, flow_id) > (?, ?)"
            args += [store.t(datetime.fromisoformat(mark[0])), mark[1]]
        rows = x.all(sql + " ORDER BY updated_at, flow_id LIMIT ?", (*args, batch))
        if not rows:
            return False
        ids = [row[0] for row in rows]
        marks = ",".join("?" * len(ids))
        counts = x.all(
            f"SELECT flow_id, count(*) FROM ep_log WHERE flow_id IN ({marks}) GROUP BY flow_id", ids
        )
        x.many(
            "INSERT INTO ep_flow_summary (flow_id, messages, compacted_at) VALUES (?, ?, ?)"
            " ON CONFLICT (flow_id) DO UPDATE SET messages = ep_flow_summary.messages + excluded.messages,"
            " compacted_at = excluded.compacted_at",
            [(fid, int(n), store.t(now)) for fid, n in counts],
        )
        _shrink_replays(store, x, ids, marks)
        for table in ("ep_log", "ep_flow_msgids", "ep_flow_refs"):
            r._add(r.removed, table, x.exec(f"DELETE FROM {table} WHERE flow_id IN ({marks})", ids))
        last = rows[-1]
        _set_mark(store, x, "flows", (_text_time(store, last[1]), last[0]), now)
    r.flows += len(ids)
    return len(rows) >= batch


def _shrink_replays(store: SqlStore, x: Executor, ids: list[str], marks: str) -> None:
    """The (sender, id) pairs of the flows' inbound messages keep their row; the recorded
    outcome shrinks (its outbox rows are gone: a retransmission now requeues nothing)."""
    pairs = x.all(
        "SELECT DISTINCT f.local, l.sender, l.protocol_id FROM ep_log l"
        " JOIN ep_flows f ON f.flow_id = l.flow_id"
        f" WHERE l.flow_id IN ({marks}) AND l.direction = 'in' AND l.protocol_id IS NOT NULL"
        " AND l.sender IS NOT NULL",
        ids,
    )
    for local, sender, pid in pairs:
        row = x.one(
            "SELECT outcome FROM ep_replay WHERE local = ? AND sender = ? AND protocol_id = ?"
            " AND status = 'done'",
            (local, sender, pid),
        )
        if row is not None:
            x.exec(
                "UPDATE ep_replay SET outcome = ? WHERE local = ? AND sender = ? AND protocol_id = ?",
                (store.j(_small(store.uj_opt(row[0]))), local, sender, pid),
            )


def _inbound(store: SqlStore, r: CompactReport, cutoff: datetime, now: datetime, batch: int) -> bool:
    # A claim's lease and worker mean nothing once it is done (begin_step answers `seen`
    # from the status first); clearing the lease also takes the row out of the index
    # this walk reads, so compacted claims cost the next run nothing.
    with store.write() as x:
        rows = x.all(
            "SELECT local, message_id, outcome FROM ep_inbound WHERE status = 'done'"
            " AND lease_until IS NOT NULL AND done_at < ? ORDER BY done_at LIMIT ?",
            (store.t(cutoff), batch),
        )
        x.many(
            "UPDATE ep_inbound SET outcome = ?, lease_until = NULL, worker = NULL"
            " WHERE local = ? AND message_id = ?",
            [(store.j(_small(store.uj_opt(o))), loc, mid) for loc, mid, o in rows],
        )
    r._add(r.trimmed, "ep_inbound", len(rows))
    return len(rows) >= batch


def _vacuum(store: SqlStore) -> None:
    pool = getattr(store, "pool", None)
    if pool is None:  # SQLite: free pages are reused by later writes; nothing to run online
        return
    with pool.connection() as conn:  # autocommit: VACUUM (not FULL) runs beside the workers
        for table in (*_TABLES, "ep_flows"):
            conn.execute(f"VACUUM {table}")


def ledger_bytes(store: SqlStore) -> int:
    """Bytes the ledger's tables and indexes hold (SQLite: pages in use; PostgreSQL: the
    `ep_` relations with their indexes and TOAST)."""
    pool = getattr(store, "pool", None)
    if pool is None:
        with store.read() as x:
            pages = x.one("PRAGMA page_count")
            free = x.one("PRAGMA freelist_count")
            size = x.one("PRAGMA page_size")
        assert pages is not None and free is not None and size is not None
        return (int(pages[0]) - int(free[0])) * int(size[0])
    with store.read() as x:
        row = x.one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND left(c.relname, 3) = 'ep_' AND n.nspname = current_schema()"
        )
    assert row is not None
    return int(row[0])
