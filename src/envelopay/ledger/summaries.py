"""Read-only summaries of one agent's ledger, for the worker's console (node/console.py):
flows counted by kind and state, flows found by peer / kind / state a page at a time, the
inbound entries that carried a payment verdict, and the OOPS the agent sent. Shared by
the SQLite and PostgreSQL backends, like the rest of `SqlStore`; nothing here writes. The
methods are the `Summaries` part of the Store protocol (ledger/store.py, with their record
types, re-exported here).

Each statement starts from an index: the flows from `ep_flows_local_recent` (local,
updated_at, flow_id), their log entries from `ep_log_flow`, the outbox from its primary
key. A payment's log entry belongs to a flow updated no earlier than the entry, so the
flows updated since `since` hold every entry since then.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from envelopay.ledger._sql_base import Row, SqlBase
from envelopay.ledger.store import (
    FlowCount,
    FlowFilter,
    FlowRecord,
    JobLine,
    LogEntry,
    OopsSent,
    RefundLine,
    Summaries,
)

__all__ = ["FlowCount", "FlowFilter", "JobLine", "OopsSent", "RefundLine", "Summaries", "SummariesMixin"]

_FLOW_COLS = (
    "f.flow_id, f.local, f.peer, f.kind, f.side, f.state, f.version, f.data, f.created_at, f.updated_at"
)
# The OOPS code inside an outbox row's JSON body, per dialect (SQLite keeps JSON as text).
_OOPS_CODE = {"sqlite": "json_extract(body, '$.error.code')", "postgres": "body->'error'->>'code'"}
# Whether a component (jobs: ledger/jobs.py, refunds: ledger/refunds.py) has made its
# table in this database yet.
_HAS_TABLE = {
    "sqlite": "SELECT 1 AS found FROM sqlite_master WHERE type = 'table' AND name = ?",
    "postgres": "SELECT 1 AS found WHERE to_regclass(?) IS NOT NULL",
}


class SummariesMixin(SqlBase):
    """The summaries over a SqlStore's executor and codecs."""


    if TYPE_CHECKING:

        def _flow(self, row: Row) -> FlowRecord: ...  # SqlStore's

    def change_mark(self, local: str) -> tuple[str, ...]:
        """What moves when `local` does anything the console shows: its newest flow (updated_at,
        flow_id) and the outbox's newest row, each one step down an index (a poll asks this
        first, and reads the counts only when it moved). A job or refund that moves without
        a flow or a mail does not move it."""
        with self.read() as x:
            flow = x.one(
                "SELECT updated_at, flow_id FROM ep_flows WHERE local = ?"
                " ORDER BY updated_at DESC, flow_id DESC LIMIT 1",
                (local.lower(),),
            )
            out = x.one("SELECT seq FROM ep_outbox ORDER BY seq DESC LIMIT 1")
        return (
            "" if flow is None else f"{self.ut(flow['updated_at']).isoformat()} {flow['flow_id']}",
            "" if out is None else str(out["seq"]),
        )

    def flow_counts(self, local: str) -> list[FlowCount]:
        """How many of `local`'s flows are in each (kind, state), most first."""
        with self.read() as x:
            rows = x.all(
                "SELECT kind, state, COUNT(*) AS n FROM ep_flows WHERE local = ? GROUP BY kind, state",
                (local.lower(),),
            )
        counts = [FlowCount(r["kind"], r["state"], int(r["n"])) for r in rows]
        return sorted(counts, key=lambda c: (-c.count, c.kind, c.state))

    def find_flows(
        self, local: str, where: FlowFilter, limit: int = 50, before: tuple[datetime, str] | None = None
    ) -> list[FlowRecord]:
        """`local`'s flows that match `where`, newest first (updated_at, then flow_id,
        descending); `before` = (updated_at, flow_id) of the previous page's last flow."""
        sql, args = [f"SELECT {_FLOW_COLS} FROM ep_flows f WHERE f.local = ?"], [local.lower()]
        for column, value in (("peer", where.peer), ("kind", where.kind), ("state", where.state)):
            if value is not None:
                sql.append(f"AND f.{column} = ?")
                args.append(value.lower() if column == "peer" else value)
        if before is not None:
            sql.append("AND (f.updated_at, f.flow_id) < (?, ?)")
            args += [self.t(before[0]), before[1]]
        sql.append("ORDER BY f.updated_at DESC, f.flow_id DESC LIMIT ?")
        with self.read() as x:
            rows = x.all(" ".join(sql), (*args, limit))
        return [self._flow(r) for r in rows]

    def paid_entries(self, local: str, since: datetime) -> list[LogEntry]:
        """The inbound log entries of `local`'s flows since `since` that carry a rail's
        verdict (a PAY, an OFFER's give leg), oldest first. Whether the money counts (the
        verdict ok, no OOPS) is the reader's to judge."""
        with self.read() as x:
            rows = x.all(
                "SELECT l.seq, l.flow_id, l.at, l.direction, l.type, l.message_id, l.protocol_id, l.sender,"
                " l.recipient, l.body, l.verdict, l.oops"
                " FROM ep_flows f JOIN ep_log l ON l.flow_id = f.flow_id"
                " WHERE f.local = ? AND f.updated_at >= ? AND l.at >= ? AND l.direction = 'in'"
                " AND l.verdict IS NOT NULL ORDER BY l.at, l.seq",
                (local.lower(), self.t(since), self.t(since)),
            )
        return [
            LogEntry(
                flow_id=r["flow_id"], at=self.ut(r["at"]), direction=r["direction"], type=r["type"],
                message_id=r["message_id"], protocol_id=r["protocol_id"], sender=r["sender"],
                recipient=r["recipient"], body=self.uj_opt(r["body"]), verdict=self.uj_opt(r["verdict"]),
                oops=r["oops"], seq=int(r["seq"]),
            )
            for r in rows
        ]

    def oops_counts(self, local: str, since: datetime) -> dict[str, int]:
        """The OOPS `local` wrote since `since`, counted by code (most first)."""
        code = _OOPS_CODE[self.dialect]
        with self.read() as x:
            rows = x.all(
                f"SELECT {code} AS code, COUNT(*) AS n FROM ep_outbox WHERE sender = ? AND type = 'oops'"
                f" AND created_at >= ? GROUP BY {code}",
                (local.lower(), self.t(since)),
            )
        counted = sorted(((str(r["code"] or "-"), int(r["n"])) for r in rows), key=lambda c: (-c[1], c[0]))
        return dict(counted)

    def oops_recent(self, local: str, limit: int = 20) -> list[OopsSent]:
        """The last `limit` OOPS `local` wrote, newest first."""
        with self.read() as x:
            rows = x.all(
                "SELECT message_id, recipient, body, flow_id, status, created_at FROM ep_outbox"
                " WHERE sender = ? AND type = 'oops' ORDER BY seq DESC LIMIT ?",
                (local.lower(), limit),
            )
        out = []
        for r in rows:
            body = self.uj(r["body"])
            error = body.get("error") if isinstance(body, dict) else None
            code = error.get("code") if isinstance(error, dict) else None
            note = body.get("note") if isinstance(body, dict) else None
            out.append(OopsSent(self.ut(r["created_at"]), r["message_id"], r["recipient"],
                                code if isinstance(code, str) else None,
                                note if isinstance(note, str) else "", r["flow_id"], r["status"]))
        return out

    # -- jobs (the table of ledger/jobs.py, made by its own migration component)
    def job_counts(self, local: str) -> dict[str, int] | None:
        """`local`'s jobs counted by state; None while the ledger has no jobs table."""
        return self._counts("ep_jobs", "state", local)

    def _counts(self, table: str, column: str, local: str) -> dict[str, int] | None:
        """`local`'s rows of `table` counted by `column` (names of ours, never input), in
        its order; None while the ledger has no such table (its component not migrated)."""
        with self.read() as x:
            if not x.all(_HAS_TABLE[self.dialect], (table,)):
                return None
            rows = x.all(f"SELECT {column} AS k, COUNT(*) AS n FROM {table} WHERE local = ?"
                         f" GROUP BY {column}", (local.lower(),))
        return {str(r["k"]): int(r["n"]) for r in sorted(rows, key=lambda r: str(r["k"]))}

    def recent_jobs(self, local: str, limit: int = 20, states: tuple[str, ...] = ()) -> list[JobLine]:
        """`local`'s jobs last changed, newest first (only `states` when given); [] while
        the ledger has no jobs table."""
        sql = ("SELECT job_id, flow_id, peer, task, state, chain, token, amount, error, refund, updated_at"
               " FROM ep_jobs WHERE local = ?")
        args: list[Any] = [local.lower()]
        if states:
            sql += " AND state IN (" + ", ".join("?" * len(states)) + ")"
            args += states
        with self.read() as x:
            if not x.all(_HAS_TABLE[self.dialect], ("ep_jobs",)):
                return []
            rows = x.all(sql + " ORDER BY updated_at DESC, job_id DESC LIMIT ?", (*args, limit))
        return [
            JobLine(r["job_id"], r["flow_id"], r["peer"], r["task"], r["state"], r["chain"], r["token"],
                    int(r["amount"]), r["error"], self.uj_opt(r["refund"]), self.ut(r["updated_at"]))
            for r in rows
        ]

    # -- refunds (the table of ledger/refunds.py, its own migration component)
    def refund_counts(self, local: str) -> dict[str, int] | None:
        """`local`'s refunds counted by status; None while the ledger has no refunds table."""
        return self._counts("ep_refunds", "status", local)

    def refunds_paid_since(self, local: str, since: datetime) -> list[RefundLine]:
        """`local`'s refunds paid since `since` (when last changed), oldest first: the money
        that went back, beside the revenue; [] while there is no refunds table."""
        with self.read() as x:
            if not x.all(_HAS_TABLE[self.dialect], ("ep_refunds",)):
                return []
            rows = x.all(
                "SELECT refund_key, flow_id, peer, chain, token, amount, reason, status, tx_id, updated_at"
                " FROM ep_refunds WHERE status = 'paid' AND local = ? AND updated_at >= ?"
                " ORDER BY updated_at, refund_key",
                (local.lower(), self.t(since)),
            )
        return [
            RefundLine(r["refund_key"], r["flow_id"], r["peer"], r["chain"], r["token"], int(r["amount"]),
                       r["reason"], r["status"], r["tx_id"], self.ut(r["updated_at"]))
            for r in rows
        ]

    def recent_refunds(self, local: str, limit: int = 20) -> list[RefundLine]:
        """`local`'s refunds last changed, newest first; [] while there is no refunds table."""
        with self.read() as x:
            if not x.all(_HAS_TABLE[self.dialect], ("ep_refunds",)):
                return []
            rows = x.all(
                "SELECT refund_key, flow_id, peer, chain, token, amount, reason, status, tx_id, updated_at"
                " FROM ep_refunds WHERE local = ? ORDER BY updated_at DESC, refund_key DESC LIMIT ?",
                (local.lower(), limit),
            )
        return [
            RefundLine(r["refund_key"], r["flow_id"], r["peer"], r["chain"], r["token"], int(r["amount"]),
                       r["reason"], r["status"], r["tx_id"], self.ut(r["updated_at"]))
            for r in rows
        ]
