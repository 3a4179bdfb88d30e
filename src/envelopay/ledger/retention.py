"""Ledger retention: what is kept forever in its smallest form, and what ages out.

Kept forever (they are what refuses replays; SPEC.md "Retention"):
- spent proof keys (`ep_proofs`): a proof spent once is refused for good; the row keeps
  its key, owner and times (v10 writes no verdict; an older row's verdict is cleared);
- the (sender, id) pairs (`ep_replay`): a reused id is refused, a retransmission is
  still recognised. Once its flow is compacted the pair keeps 16 bytes of the body's
  hash (`digest`, compacted.py) and no outcome: a retransmission answers with its
  original claim's;
- each inbound Message-ID claim (`ep_inbound`): a redelivered message is still `seen`;
  its outcome shrinks to its status and flow (compacted.small), and its lease, worker,
  unused content hash and done time are cleared;
- the flow row (`ep_flows`: state, data, version), with `compacted`: how many log
  entries were deleted (the per-flow summary).

Aged out once older than the window the operator gives:
- outbox rows no longer pending (sent, failed, bounced), by `created_at`;
- for flows not updated within the window: their message log, Message-ID links and
  typed refs. A late message in such a flow no longer finds it (it is answered as an
  unknown ref, or starts a new flow): the window is also the flows' idle lifetime;
- settled calls of the email-as-tool client, by `resolved_at`;
- transport events (`ep_events`: AgentMail webhook event ids, handled message ids, the
  Message-ID → AgentMail id map), by `done_at`, never younger than EVENTS_FLOOR (the
  AgentMail poller looks back 7 days; a message it lists must still be known handled).

Online: every batch is one short write transaction of a few set-based statements on
the store's own connection (no statement per row), so workers keep running beside it
(SQLite: they wait at most one batch for the write lock; PostgreSQL: only the compacted
rows are locked). Each walk goes in index order from where its last batch stopped
(keyset pagination: a batch never rescans what earlier batches removed), and the flow
walk keeps its cursor in `ep_retention`, so a run costs what it removes, not the
ledger's size. Deleted space is reused by later writes (SQLite's free pages;
PostgreSQL's VACUUM, which `vacuum=True` runs, online, after the batches).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from envelopay.ledger._sql import Executor, SqlStore
from envelopay.ledger.evidence import forget_flows

__all__ = ["EVENTS_FLOOR", "CompactReport", "compact_ledger", "ledger_bytes"]

EVENTS_FLOOR = timedelta(days=7)
_TABLES = ("ep_log", "ep_outbox", "ep_flow_msgids", "ep_flow_refs", "ep_inbound", "ep_calls", "ep_replay",
           "ep_proofs", "ep_events", "ep_flows")


@dataclass
class CompactReport:
    cutoff: datetime
    flows: int = 0  # flows compacted (their log counted into `ep_flows.compacted`)
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
        if n > 0:
            where[table] = where.get(table, 0) + n


@dataclass(frozen=True)
class _Walk:
    """One time-ordered batch walk over a partial index: `action` applies to the rows
    matching `where` whose time `at` is older than the cutoff, oldest first."""

    table: str
    at: str
    where: str
    action: str  # "DELETE FROM t" or "UPDATE t SET ..."
    trims: bool = False  # counted as trimmed (kept, shrunk) rather than removed


_WALKS = (
    _Walk("ep_outbox", "created_at", "status <> 'pending'", "DELETE FROM ep_outbox"),
    _Walk("ep_calls", "resolved_at", "status <> 'pending'", "DELETE FROM ep_calls"),
    _Walk("ep_events", "done_at", "done_at IS NOT NULL", "DELETE FROM ep_events"),
    _Walk("ep_proofs", "spent_at", "status = 'spent' AND verdict IS NOT NULL",
          "UPDATE ep_proofs SET verdict = NULL", trims=True),
    # A claim's lease and worker mean nothing once it is done (begin_step answers `seen`
    # from the status first), nor its content hash (the pair holds the one compared);
    # clearing the lease takes the row out of the index this walk reads.
    _Walk("ep_inbound", "done_at", "status = 'done' AND lease_until IS NOT NULL",
          "UPDATE ep_inbound SET outcome = ep_small(outcome), lease_until = NULL, worker = NULL,"
          " content_hash = '', done_at = NULL", trims=True),
)


def _mark(x: Executor, name: str) -> list[str] | None:
    row = x.one("SELECT mark FROM ep_retention WHERE name = ?", (name,))
    return None if row is None else list(json.loads(row["mark"]))


def _set_mark(store: SqlStore, x: Executor, name: str, mark: Sequence[Any], now: datetime) -> None:
    x.exec(
        "INSERT INTO ep_retention (name, mark, at) VALUES (?, ?, ?)"
        " ON CONFLICT (name) DO UPDATE SET mark = excluded.mark, at = excluded.at",
        (name, json.dumps([str(m) for m in mark]), store.t(now)),
    )


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
    _statistics(store)
    while _flows(store, report, cutoff, now, batch):
        if pause is not None:
            pause()
    for walk in _WALKS:
        until = min(cutoff, now - EVENTS_FLOOR) if walk.table == "ep_events" else cutoff
        since: Any = None
        while True:
            n, seen, since = _batch(store, walk, store.t(until), since, batch)
            report._add(report.trimmed if walk.trims else report.removed, walk.table, n)
            if seen < batch:
                break
            if pause is not None:
                pause()
    if vacuum:
        _vacuum(store)
    return report


def _batch(store: SqlStore, w: _Walk, until: Any, since: Any, batch: int) -> tuple[int, int, Any]:
    """One batch of a walk: (rows done, rows it chose, where the next batch starts). The batch
    is an index range: from the last batch's end (inclusive: rows of that time it did
    not reach still match, the ones it did no longer do) to the time of the `batch`-th
    row, so no batch steps again over what earlier ones removed (PostgreSQL keeps dead
    index entries until VACUUM) and no statement names rows one by one."""
    rng, args = f"{w.where} AND {w.at} < ?", [until]
    if since is not None:
        rng, args = rng + f" AND {w.at} >= ?", [*args, since]
    with store.write() as x:
        got = x.one(
            f"SELECT count(*) AS n, max(at) AS upto FROM (SELECT {w.at} AS at FROM {w.table} WHERE {rng}"
            f" ORDER BY {w.at} LIMIT ?) b",
            (*args, batch),
        )
        if got is None or not got["n"]:
            return 0, 0, since
        n = x.exec(f"{w.action} WHERE {rng} AND {w.at} <= ?", (*args, got["upto"]))
    return n, int(got["n"]), got["upto"]


def _flows(store: SqlStore, r: CompactReport, cutoff: datetime, now: datetime, batch: int) -> bool:
    with store.write() as x:
        mark = _mark(x, "flows")
        sql = "SELECT flow_id, updated_at, local FROM ep_flows WHERE updated_at < ?"
        args: list[Any] = [store.t(cutoff)]
        if mark is not None:
            sql += " AND (updated_at, flow_id) > (?, ?)"
            args += [store.t(datetime.fromisoformat(mark[0])), mark[1]]
        rows = x.all(sql + " ORDER BY updated_at, flow_id LIMIT ?", (*args, batch))
        if not rows:
            return False
        ids = [row["flow_id"] for row in rows]
        marks = ",".join("?" * len(ids))
        x.exec(
            "UPDATE ep_flows SET compacted = coalesce(compacted, 0)"
            " + (SELECT count(*) FROM ep_log l WHERE l.flow_id = ep_flows.flow_id)"
            f" WHERE flow_id IN ({marks})",
            ids,
        )
        # The flows' (sender, id) pairs keep their row and 16 bytes of the hash; the
        # outcome goes (the original claim keeps its own, which a retransmission reads).
        # One primary-key update per pair, pipelined: a join here is a plan that can
        # flip (without statistics PostgreSQL walked the log for every pair).
        local = {row["flow_id"]: row["local"] for row in rows}
        pairs = x.all(
            f"SELECT flow_id, sender, protocol_id FROM ep_log WHERE flow_id IN ({marks})"
            " AND direction = 'in' AND protocol_id IS NOT NULL AND sender IS NOT NULL",
            ids,
        )
        keys = sorted({(local[p["flow_id"]], p["sender"], p["protocol_id"]) for p in pairs})
        if keys:
            r._add(r.trimmed, "ep_replay", x.many(
                "UPDATE ep_replay SET digest = ep_digest(content_hash), content_hash = '', outcome = NULL"
                " WHERE local = ? AND sender = ? AND protocol_id = ? AND digest IS NULL AND status = 'done'"
                " AND EXISTS (SELECT 1 FROM ep_inbound i WHERE i.local = ep_replay.local"
                " AND i.message_id = ep_replay.owner)",
                keys,
            ))
        r._add(r.removed, "ep_raw_mail", forget_flows(x, ids))  # evidence goes with the log it needs
        for table in ("ep_log", "ep_flow_msgids", "ep_flow_refs"):
            r._add(r.removed, table, x.exec(f"DELETE FROM {table} WHERE flow_id IN ({marks})", ids))
        last = rows[-1]
        _set_mark(store, x, "flows", (store.ut(last["updated_at"]).isoformat(), last["flow_id"]), now)
    r.flows += len(ids)
    return len(rows) >= batch


def _statistics(store: SqlStore) -> None:
    """PostgreSQL: statistics first (ANALYZE samples; online). Without any, as on a
    ledger just filled or restored, the planner may walk a whole table for each batch."""
    pool = getattr(store, "pool", None)
    if pool is not None:
        with pool.connection() as conn:
            for table in _TABLES:
                conn.execute(f"ANALYZE {table}")


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
        return (int(pages["page_count"]) - int(free["freelist_count"])) * int(size["page_size"])
    with store.read() as x:
        row = x.one(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS bytes FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relkind = 'r' AND left(c.relname, 3) = 'ep_' AND n.nspname = current_schema()"
        )
    assert row is not None
    return int(row["bytes"])
