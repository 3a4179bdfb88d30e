"""The scale-out ledger: PostgreSQL through psycopg 3 and a psycopg_pool connection pool.

Many processes on many machines share one database. Every reservation is a single
`INSERT ... ON CONFLICT DO NOTHING RETURNING` (one winner, no read-then-write race);
the rows a step goes on to update are locked with `SELECT ... FOR UPDATE`. Schema
migrations are versioned in `ep_versions` (the one migrator, envelopay.persist) and
applied under an advisory lock, so
several workers starting at once upgrade an existing database exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from envelopay.errors import StoreError
from envelopay.ledger._sql import Executor, Row, SqlStore
from envelopay.ledger._sql_base import apply_migrations, ledger_version
from envelopay.ledger.schema import LATEST
from envelopay.ledger.store import Begin, Claim, Commit, CommitResult, FlowRecord, outbound_to_row
from envelopay.persist.adapters import pg_refusal
from envelopay.persist.rows import named_row

__all__ = ["PostgresStore"]

_MIGRATION_LOCK = 0x65_70_6C_65  # "eple": one advisory lock id for schema changes
_LOCK_TRIES = 50


def _pg(sql: str) -> str:
    return sql.replace("?", "%s")


class _Cursor(Executor):
    def __init__(self, cur: psycopg.Cursor[Any]) -> None:
        self.cur = cur

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        self.cur.execute(_pg(sql), params)
        if self.cur.description is None:
            return None
        row: Row | None = self.cur.fetchone()
        return row

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        self.cur.execute(_pg(sql), params)
        return list(self.cur.fetchall())

    def exec(self, sql: str, params: Sequence[Any] = ()) -> int:
        self.cur.execute(_pg(sql), params)
        return self.cur.rowcount

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        self.cur.executemany(_pg(sql), rows)
        return self.cur.rowcount


class PostgresStore(SqlStore):
    dialect = "postgres"
    lock_clause = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, dsn: str, *, min_size: int = 1, max_size: int = 4, migrate: bool = True) -> None:
        self.dsn = dsn
        self._server_steps: bool | None = None
        refusal = pg_refusal(dsn)
        if refusal is not None:
            raise StoreError(f"cannot reach PostgreSQL ledger: the server refused: {refusal}")
        try:
            self.pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
                dsn, min_size=min_size, max_size=max_size, open=True,
                kwargs={"autocommit": True, "row_factory": named_row},  # rows by column name
            )
            self.pool.wait(timeout=30)
        except (psycopg.Error, Exception) as exc:
            raise StoreError(f"cannot reach PostgreSQL ledger: {exc}") from exc
        if migrate:
            self.migrate()

    @contextmanager
    def write(self) -> Iterator[Executor]:
        try:
            with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
                yield _Cursor(cur)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc

    @contextmanager
    def read(self) -> Iterator[Executor]:
        try:
            with self.pool.connection() as conn, conn.cursor() as cur:
                yield _Cursor(cur)
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc

    def t(self, dt: datetime | None) -> Any:
        return dt

    def ut(self, value: Any) -> datetime:
        assert isinstance(value, datetime)
        return value

    def j(self, obj: Any) -> Any:
        return Jsonb(obj)

    def uj(self, value: Any) -> Any:
        return value

    # -- the two step transactions, one server-side call each (schema v3)
    def _server_side(self) -> bool:
        if self._server_steps is None:
            self._server_steps = self.version() >= 3
        return self._server_steps

    def begin_step(self, claim: Claim) -> Begin:
        if not self._server_side():  # an old schema not yet migrated: the portable path
            return super().begin_step(claim)
        c = claim
        proof = c.proof
        try:
            with self.pool.connection() as conn:
                row = conn.execute(
                    "SELECT ep_begin_step(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) AS doc",
                    (
                        c.local,
                        c.message_id,
                        c.content_hash,
                        c.worker,
                        c.now,
                        c.lease_until,
                        c.sender,
                        c.protocol_id,
                        proof.chain if proof else None,
                        proof.key if proof else None,
                        list(c.refs),
                        list(c.thread),
                    ),
                ).fetchone()
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc
        assert row is not None
        doc: dict[str, Any] = row["doc"]
        status = doc["status"]
        if status in ("seen", "retransmission"):
            return Begin(status, outcome=doc["outcome"], requeued=tuple(doc.get("requeued", ())))
        if status != "new":
            return Begin(status)
        found: dict[str, FlowRecord] = {}
        for f in doc["ref_flows"]:
            found.setdefault(f["flow_id"], _flow(f))
        return Begin(
            "new",
            ref_flows=tuple(found.values()),
            thread_flows=tuple((mid, _flow(f)) for mid, f in doc["thread"]),
            missing_refs=tuple(doc["missing"]),
        )

    def commit_step(self, commit: Commit) -> CommitResult:
        if not self._server_side() or commit.job_new is not None or commit.job_move is not None:
            # A step that writes a job: the portable path, one transaction (the server-side
            # function predates jobs).
            return super().commit_step(commit)
        c = commit
        flow = None
        if c.flow is not None:
            r = c.flow.record
            flow = {
                "flow_id": r.flow_id,
                "local": r.local,
                "peer": r.peer,
                "kind": r.kind,
                "side": r.side,
                "state": r.state,
                "version": r.version,
                "data": dict(r.data),
            }
        outbox = []
        for ob, fid in c.outbox:
            d = outbound_to_row(ob)
            d["date"] = d["date"].isoformat()
            d["flow_id"] = fid
            outbox.append(d)
        doc = {
            "local": c.local,
            "now": c.now.isoformat(),
            "message_id": c.message_id,
            "outcome": dict(c.outcome),
            "flow_id": flow["flow_id"] if flow else c.outcome.get("flow_id"),
            "flow": flow,
            "refs": [list(x) for x in c.refs],
            "message_ids": [list(x) for x in c.message_ids],
            "log": [
                {
                    "flow_id": e.flow_id,
                    "at": e.at.isoformat(),
                    "direction": e.direction,
                    "type": e.type,
                    "message_id": e.message_id,
                    "protocol_id": e.protocol_id,
                    "sender": e.sender,
                    "recipient": e.recipient,
                    "body": e.body,
                    "verdict": dict(e.verdict) if e.verdict else None,
                    "oops": e.oops,
                }
                for e in c.log
            ],
            "outbox": outbox,
            "chain": c.proof.chain if c.proof else None,
            "proof_key": c.proof.key if c.proof else None,
            "proof_fate": c.proof_fate if c.proof else None,
            "proof_verdict": dict(c.proof_verdict or {}),
            "sender": c.sender,
            "protocol_id": c.protocol_id,
            "replay_fate": c.replay_fate if c.sender is not None and c.protocol_id is not None else None,
            "hold": c.hold,
        }
        try:
            with self.pool.connection() as conn:
                row = conn.execute("SELECT ep_commit_step(%s) AS result", (Jsonb(doc),)).fetchone()
        except psycopg.Error as exc:
            if exc.sqlstate == "EPLST":  # raised after a write, to roll the call back
                return "lost"
            raise StoreError(f"PostgreSQL ledger: {exc}") from exc
        assert row is not None
        result: CommitResult = row["result"]
        return result

    def _answer_lock(self, x: Executor, local: str, peer: str) -> None:
        # Two workers drawing for one peer at once would both count below the limit.
        x.one("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (f"ep_answers {local} {peer}",))

    def version(self) -> int:
        with self.write() as x:
            return ledger_version(x, "postgres")

    def migrate(self, target: int = LATEST) -> int:
        # A migration that alters tables takes every ep_ table's lock at once, NOWAIT,
        # before its first statement: waiting for one lock while holding another could
        # deadlock with live workers (a step's two calls take ep_replay and ep_flows in
        # opposite orders). Busy: roll back, wait a moment, try again; the last try waits.
        current = 0
        for attempt in range(_LOCK_TRIES):
            try:
                current = self._migrate(target, nowait=attempt < _LOCK_TRIES - 1)
                break
            except StoreError as exc:
                if not isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
                    raise
                time.sleep(0.02 * (attempt + 1))
        self._server_steps = current >= 3
        return current

    def _migrate(self, target: int, *, nowait: bool) -> int:
        with self.write() as x:
            x.exec("SELECT pg_advisory_xact_lock(?)", (_MIGRATION_LOCK,))
            if ledger_version(x, "postgres") < target:
                tables = [r["tablename"] for r in x.all(
                    "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                    " AND left(tablename, 3) = 'ep_' AND tablename NOT IN ('ep_migrations', 'ep_versions')"
                    " ORDER BY tablename"
                )]
                if tables:
                    x.exec(f"LOCK TABLE {', '.join(tables)} IN ACCESS EXCLUSIVE MODE{' NOWAIT' * nowait}")
            return apply_migrations(x, "postgres", target, datetime.now(UTC).isoformat())

    def close(self) -> None:
        self.pool.close()


def _flow(f: dict[str, Any]) -> FlowRecord:
    return FlowRecord(
        flow_id=f["flow_id"],
        local=f["local"],
        peer=f["peer"],
        kind=f["kind"],
        side=f["side"],
        state=f["state"],
        version=int(f["version"]),
        data=f["data"],
        created_at=datetime.fromisoformat(f["created_at"]),
        updated_at=datetime.fromisoformat(f["updated_at"]),
    )
