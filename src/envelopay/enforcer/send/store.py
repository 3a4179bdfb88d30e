"""Durable enforcer state on SQLite (embedded) or PostgreSQL, in `enf_`-prefixed tables so
it can share a database with the ledger.

Every cap and every queue decision is ONE conditional statement; nothing here reads a
value and writes it back. Database faults surface as StoreError (the enforcer turns them
into `failed`); a condition that did not hold is a plain False / None.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envelopay.enforcer.common.batch import Batch, Step, cursor_rows
from envelopay.enforcer.common.liveness import FileLiveness, PgLiveness
from envelopay.enforcer.common.sqlite_wal import BACKSTOP_PAGES, Checkpointer
from envelopay.enforcer.common.wallet_locks import file_lock, pg_advisory_lock
from envelopay.enforcer.send.model import Agent, Policy, QueueRow, QueueState, SendRequest
from envelopay.errors import ConfigError, StoreError
from envelopay.persist import Migrations, NamedRow
from envelopay.persist import Step as MigrationStep
from envelopay.persist.adapters import migrate_postgres, migrate_sqlite
from envelopay.persist.rows import Record, columns, named_row

__all__ = [
    "QUEUE_ORDER",
    "SEND_MIGRATIONS",
    "EnforcerStore",
    "PostgresStore",
    "QueueCursor",
    "SqliteStore",
    "open_store",
]



_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS enf_agents (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        address TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL CHECK (status IN ('ACTIVE', 'KILLED')),
        hourly_cap INTEGER NOT NULL,
        daily_cap INTEGER NOT NULL,
        allow TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS enf_counters (
        agent_id TEXT NOT NULL,
        win TEXT NOT NULL,
        slot TEXT NOT NULL,
        sends INTEGER NOT NULL,
        PRIMARY KEY (agent_id, win, slot))""",
    """CREATE TABLE IF NOT EXISTS enf_sends (
        id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED', 'SENT', 'FAILED')),
        reason TEXT NOT NULL,
        request TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        message_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        decided_at DOUBLE PRECISION,
        decided_by TEXT,
        updated_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS enf_sends_dup ON enf_sends (agent_id, fingerprint, state, updated_at)",
    # No index on `state` alone: the queue reads enf_sends_queue, retention enf_sends_done.
    "DROP INDEX IF EXISTS enf_sends_state",
    "CREATE INDEX IF NOT EXISTS enf_sends_msgid ON enf_sends (agent_id, message_id)",
    # One row per (agent, kind, key) held by the send that claimed it: kind "msgid" for a
    # caller-fixed Message-ID, "fp" for the duplicate guard's fingerprint. The primary key
    # is what makes both checks race-free across processes (issue 11, item 5).
    """CREATE TABLE IF NOT EXISTS enf_claims (
        agent_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        claim_key TEXT NOT NULL,
        send_id TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (agent_id, kind, claim_key))""",
    # The queue view pages state by state on this (pending first): direct sends, which the
    # queue does not show, are not in it, so a long history of them costs the view nothing.
    "CREATE INDEX IF NOT EXISTS enf_sends_queue ON enf_sends (state, created_at, id)"
    " WHERE decided_at IS NOT NULL OR state = 'PENDING'",
    # Retention (enforcer/service/retention.py) walks these: past counter slots, finished sends.
    "CREATE INDEX IF NOT EXISTS enf_counters_slot ON enf_counters (win, slot)",
    "CREATE INDEX IF NOT EXISTS enf_claims_at ON enf_claims (kind, at)",
    "CREATE INDEX IF NOT EXISTS enf_sends_done ON enf_sends (updated_at)"
    " WHERE state IN ('SENT', 'FAILED', 'REJECTED')",
    """CREATE TABLE IF NOT EXISTS enf_outcomes (
        send_id TEXT PRIMARY KEY,
        state TEXT NOT NULL,
        message_id TEXT,
        detail TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL)""",
]

# The console's activity pages (store.activity) walk these, newest first: all sends, or one
# agent's, without sorting the table.
_ACTIVITY = (
    "CREATE INDEX IF NOT EXISTS enf_sends_activity ON enf_sends (created_at, id)",
    "CREATE INDEX IF NOT EXISTS enf_sends_agent_activity ON enf_sends (agent_id, created_at, id)",
)

# The send side's schema, one migrator step per change (envelopay.persist). Step 1 is the
# schema as every release before the migrator made it, all IF NOT EXISTS: a database one of
# them created is adopted by running it again.
SEND_MIGRATIONS = Migrations(
    "enforcer_send",
    (
        MigrationStep(
            1, "agents, counters, sends, claims, outcomes", {"sqlite": _SCHEMA, "postgres": _SCHEMA}
        ),
        MigrationStep(2, "activity indexes", {"sqlite": _ACTIVITY, "postgres": _ACTIVITY}),
    ),
)

AGENT_COLS = "id, name, address, status, hourly_cap, daily_cap, allow"
_SEND_COLS = (
    "s.id, s.agent_id, s.state, s.reason, s.request, s.message_id, s.created_at, s.decided_at,"
    " s.decided_by, a.name AS agent_name"
)


def agent_row(row: NamedRow) -> Agent:
    """An agent from the AGENT_COLS columns of `row`, by name."""
    return Agent(
        id=row["id"],
        name=row["name"],
        address=row["address"],
        status=row["status"],
        policy=Policy(
            hourly_cap=int(row["hourly_cap"]),
            daily_cap=int(row["daily_cap"]),
            allow=tuple(json.loads(row["allow"])),
        ),
    )


def _request(data: dict[str, Any]) -> SendRequest:
    return SendRequest(
        to=data["to"],
        sender=data["from"],
        text=data.get("text", ""),
        subject=data.get("subject"),
        msg_type=data.get("type"),
        body=data.get("body"),
        in_reply_to=data.get("in_reply_to"),
        references=tuple(data.get("references", ())),
        reply_to=data.get("reply_to"),
        message_id=data.get("message_id"),
    )


def _row(row: NamedRow) -> QueueRow:
    decided_at = row["decided_at"]
    return QueueRow(
        id=row["id"],
        agent_id=row["agent_id"],
        state=row["state"],
        reason=row["reason"],
        request=_request(json.loads(row["request"])),
        message_id=row["message_id"],
        created_at=float(row["created_at"]),
        decided_at=None if decided_at is None else float(decided_at),
        decided_by=row["decided_by"],
        agent_name=row["agent_name"] or "",
    )


QUEUE_ORDER: tuple[QueueState, ...] = ("PENDING", "APPROVED", "FAILED", "REJECTED", "SENT")


@dataclass(frozen=True, slots=True)
class QueueCursor:
    """Where a page of the queue view ended: its last row's state, time and id."""

    state: QueueState
    created_at: float
    id: str

    def token(self) -> str:
        return f"{self.state}:{self.created_at!r}:{self.id}"

    @classmethod
    def of(cls, row: QueueRow) -> QueueCursor:
        return cls(row.state, row.created_at, row.id)

    @classmethod
    def parse(cls, token: str) -> QueueCursor | None:
        """The cursor a `token()` wrote, or None for anything else."""
        state, _, rest = token.partition(":")
        stamp, _, send_id = rest.partition(":")
        if state not in QUEUE_ORDER or not send_id:
            return None
        try:
            at = float(stamp)
        except ValueError:
            return None
        return cls(state, at, send_id)


# (statement, parameters) pairs, written once with '?' placeholders.
_SQL = {
    "insert_agent": f"INSERT INTO enf_agents ({AGENT_COLS}, token_hash, created_at)"
    " VALUES (?, ?, ?, 'ACTIVE', ?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING RETURNING id",
    "agent_by_token": f"SELECT {AGENT_COLS} FROM enf_agents WHERE token_hash = ?",
    "agent_by_name": f"SELECT {AGENT_COLS} FROM enf_agents WHERE name = ?",
    "agent_by_id": f"SELECT {AGENT_COLS} FROM enf_agents WHERE id = ?",
    "list_agents": f"SELECT {AGENT_COLS} FROM enf_agents ORDER BY name LIMIT ?",
    "list_agents_after": f"SELECT {AGENT_COLS} FROM enf_agents WHERE name > ? ORDER BY name LIMIT ?",
    # The only statement that writes an agent's status, and it writes a literal.
    "kill": f"UPDATE enf_agents SET status = 'KILLED' WHERE name = ? RETURNING {AGENT_COLS}",
    "take_slot": "INSERT INTO enf_counters (agent_id, win, slot, sends) VALUES (?, ?, ?, 1)"
    " ON CONFLICT (agent_id, win, slot) DO UPDATE SET sends = enf_counters.sends + 1"
    " WHERE enf_counters.sends < ? RETURNING sends",
    "give_back": "UPDATE enf_counters SET sends = sends - 1"
    " WHERE agent_id = ? AND win = ? AND slot = ? AND sends > 0",
    "counter": "SELECT sends FROM enf_counters WHERE agent_id = ? AND win = ? AND slot = ?",
    "recent_success": "SELECT 1 FROM enf_sends WHERE agent_id = ? AND fingerprint = ?"
    " AND state = 'SENT' AND updated_at >= ? LIMIT 1",
    "insert_send": "INSERT INTO enf_sends (id, agent_id, state, reason, request, fingerprint, message_id,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "get_send": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE s.id = ?",
    "send_by_message_id": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a"
    " ON a.id = s.agent_id WHERE s.agent_id = ? AND s.message_id = ? ORDER BY s.created_at LIMIT 1",
    "queue_state": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.decided_at IS NOT NULL OR s.state = 'PENDING') AND s.state = ?"
    " ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    # The console's activity: every recorded send, newest first, before a (time, id).
    "activity": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.created_at, s.id) < (?, ?) ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    "activity_of": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.created_at, s.id) < (?, ?) AND s.agent_id = ? ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    "queue_state_before": f"SELECT {_SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.decided_at IS NOT NULL OR s.state = 'PENDING') AND s.state = ?"
    " AND (s.created_at, s.id) < (?, ?) ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    # A decision: one conditional UPDATE; approval also requires the agent to be ACTIVE.
    # (SQLite: an autocommit write reads the latest commit under the one writer lock, so a
    # kill is either before it or after it. PostgreSQL: see _PG_SQL.)
    "approve": "UPDATE enf_sends SET state = 'APPROVED', decided_by = ?, decided_at = ?, updated_at = ?"
    " WHERE id = ? AND state = 'PENDING' AND EXISTS (SELECT 1 FROM enf_agents a"
    " WHERE a.id = enf_sends.agent_id AND a.status = 'ACTIVE') RETURNING id",
    "reject": "UPDATE enf_sends SET state = 'REJECTED', decided_by = ?, decided_at = ?, updated_at = ?,"
    " reason = ? WHERE id = ? AND state = 'PENDING' RETURNING id",
    # Terminal writes are guarded on APPROVED the same way.
    "finish": "UPDATE enf_sends SET state = ?, message_id = ?, reason = ?, updated_at = ?"
    " WHERE id = ? AND state = 'APPROVED' RETURNING id",
    # Re-execution of a stranded APPROVED row: refreshing decided_at is the claim, so two
    # concurrent healers cannot both pass.
    "reclaim": "UPDATE enf_sends SET decided_at = ?, updated_at = ?"
    " WHERE id = ? AND state = 'APPROVED' AND decided_at <= ? RETURNING id",
    "put_outcome": "INSERT INTO enf_outcomes (send_id, state, message_id, detail, at) VALUES (?, ?, ?, ?, ?)"
    " ON CONFLICT (send_id) DO UPDATE SET state = excluded.state, message_id = excluded.message_id,"
    " detail = excluded.detail, at = excluded.at",
    "get_outcome": "SELECT state, message_id, detail FROM enf_outcomes WHERE send_id = ?",
    # A claim is one conditional upsert: it is taken when free, or taken over when the
    # holder's send FAILED, or (Message-ID) when the holder left no record for `stale`
    # seconds (a crash between claim and record), or (fingerprint) when it is older than
    # the duplicate window. Two processes never both get a row back.
    "claim_msgid": "INSERT INTO enf_claims (agent_id, kind, claim_key, send_id, at)"
    " VALUES (?, 'msgid', ?, ?, ?)"
    " ON CONFLICT (agent_id, kind, claim_key) DO UPDATE SET send_id = excluded.send_id, at = excluded.at"
    " WHERE EXISTS (SELECT 1 FROM enf_sends s WHERE s.id = enf_claims.send_id AND s.state = 'FAILED')"
    " OR (enf_claims.at < ? AND NOT EXISTS (SELECT 1 FROM enf_sends s WHERE s.id = enf_claims.send_id))"
    " RETURNING send_id",
    "claim_fp": "INSERT INTO enf_claims (agent_id, kind, claim_key, send_id, at) VALUES (?, 'fp', ?, ?, ?)"
    " ON CONFLICT (agent_id, kind, claim_key) DO UPDATE SET send_id = excluded.send_id, at = excluded.at"
    " WHERE enf_claims.at < ?"
    " OR EXISTS (SELECT 1 FROM enf_sends s WHERE s.id = enf_claims.send_id AND s.state = 'FAILED')"
    " RETURNING send_id",
    "claim_holder": "SELECT send_id FROM enf_claims WHERE agent_id = ? AND kind = ? AND claim_key = ?",
    "release": "DELETE FROM enf_claims WHERE agent_id = ? AND kind = ? AND claim_key = ? AND send_id = ?",
}

# PostgreSQL's versions where READ COMMITTED needs more than the portable statement.
_PG_SQL = {
    # The portable subquery reads the agent in the statement's snapshot: a kill committing
    # meanwhile is not seen, and the approval commits after the kill returned. FOR SHARE
    # locks the agent row: a kill in flight is waited for and its KILLED re-checked, and a
    # kill arriving later waits for this approval's commit. Still one conditional UPDATE.
    "approve": "UPDATE enf_sends SET state = 'APPROVED', decided_by = ?, decided_at = ?, updated_at = ?"
    " WHERE id = ? AND state = 'PENDING' AND EXISTS (SELECT 1 FROM enf_agents a"
    " WHERE a.id = enf_sends.agent_id AND a.status = 'ACTIVE' FOR SHARE) RETURNING id",
}


class EnforcerStore(ABC):
    """The enforcer's storage contract: typed operations over one `execute_sql`, which each
    backend implements (plus open/close).

    `instance` names this open store among the processes sharing it (a PAY's deliverer is
    recorded by it); `alive(instance)` says whether the store so named is still open in a
    live process (enforcer/common/liveness.py)."""

    instance: str

    @abstractmethod
    async def open(self) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...

    async def execute(self, name: str, params: Sequence[Any]) -> list[NamedRow]:
        """One of this store's named statements; its rows by column name."""
        return await self.fetch(_SQL[name], params)

    @abstractmethod
    async def migrate(self, migrations: Migrations) -> int:
        """Bring one component's tables (this store's, or the spend side's on the same
        database) to their latest version with the one migrator; the version now."""

    @staticmethod
    def step(name: str, params: Sequence[Any]) -> Step:
        """One named statement of this store, for `transaction`."""
        return _SQL[name], params

    @staticmethod
    def send_step(
        *, id: str, agent_id: str, state: QueueState, reason: str, request: SendRequest,
        fingerprint: str, message_id: str | None, now: float,
    ) -> Step:
        return _SQL["insert_send"], (
            id, agent_id, state, reason, json.dumps(request.to_json()), fingerprint, message_id, now, now
        )

    @abstractmethod
    async def execute_sql(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """One autocommit statement; its rows as tuples (raw SQL: retention, tests)."""

    @abstractmethod
    async def fetch(self, sql: str, params: Sequence[Any]) -> list[NamedRow]:
        """One autocommit statement; its rows by column name (the typed operations)."""

    @abstractmethod
    async def transaction(
        self, steps: Sequence[Step], *, require_rows: bool = False, durable: bool = True
    ) -> Batch:
        """Run `steps` in ONE transaction (one commit). With `require_rows`, a statement
        that returns no row rolls the whole batch back (a chain of conditional writes
        that holds together or not at all). `durable=False` lets PostgreSQL acknowledge
        the commit before its WAL is flushed (synchronous_commit off): a database crash
        may lose it, an enforcer crash never does, and the next durable commit flushes it
        first. SQLite in WAL mode with synchronous=NORMAL already commits that way."""

    @abstractmethod
    def wallet_lock(self, name: str) -> AbstractAsyncContextManager[None]:
        """An exclusive lock on `name` held across every process on this store, released
        when its holder dies (enforcer/common/wallet_locks.py)."""

    @abstractmethod
    async def alive(self, instance: str) -> bool:
        """Whether the store opened as `instance` is still open in a live process."""

    async def create_agent(self, agent: Agent, token_hash: str, now: float) -> bool:
        p = agent.policy
        rows = await self.execute(
            "insert_agent",
            (agent.id, agent.name, agent.address, p.hourly_cap, p.daily_cap, json.dumps(list(p.allow)),
             token_hash, now),
        )
        return bool(rows)

    async def agent_by_token(self, token_hash: str) -> Agent | None:
        rows = await self.execute("agent_by_token", (token_hash,))
        return agent_row(rows[0]) if rows else None

    async def agent_by_name(self, name: str) -> Agent | None:
        rows = await self.execute("agent_by_name", (name,))
        return agent_row(rows[0]) if rows else None

    async def agent_by_id(self, agent_id: str) -> Agent | None:
        rows = await self.execute("agent_by_id", (agent_id,))
        return agent_row(rows[0]) if rows else None

    async def list_agents(self, limit: int = 1000, after: str | None = None) -> list[Agent]:
        """Agents by name, one page: those after `after` (the previous page's last name)."""
        if after is None:
            rows = await self.execute("list_agents", (limit,))
        else:
            rows = await self.execute("list_agents_after", (after, limit))
        return [agent_row(r) for r in rows]

    async def kill_agent(self, name: str) -> Agent | None:
        rows = await self.execute("kill", (name,))
        return agent_row(rows[0]) if rows else None

    async def take_slot(self, agent_id: str, win: str, slot: str, cap: int) -> bool:
        return bool(await self.execute("take_slot", (agent_id, win, slot, cap)))

    async def give_back(self, agent_id: str, win: str, slot: str) -> None:
        await self.execute("give_back", (agent_id, win, slot))

    async def counter(self, agent_id: str, win: str, slot: str) -> int:
        rows = await self.execute("counter", (agent_id, win, slot))
        return int(rows[0]["sends"]) if rows else 0

    async def recent_success(self, agent_id: str, fp: str, since: float) -> bool:
        return bool(await self.execute("recent_success", (agent_id, fp, since)))

    async def insert_send(
        self, *, id: str, agent_id: str, state: QueueState, reason: str, request: SendRequest,
        fingerprint: str, message_id: str | None, now: float,
    ) -> None:
        await self.execute_sql(*self.send_step(
            id=id, agent_id=agent_id, state=state, reason=reason, request=request, fingerprint=fingerprint,
            message_id=message_id, now=now,
        ))

    async def get_send(self, send_id: str) -> QueueRow | None:
        rows = await self.execute("get_send", (send_id,))
        return _row(rows[0]) if rows else None

    async def send_by_message_id(self, agent_id: str, message_id: str) -> QueueRow | None:
        rows = await self.execute("send_by_message_id", (agent_id, message_id))
        return _row(rows[0]) if rows else None

    async def list_sends(self, limit: int = 200, after: QueueCursor | None = None) -> list[QueueRow]:
        """The queue view, one page: pending first, then approved, failed, rejected and sent,
        newest first within a state; `after` is the previous page's last row. Each state is
        an index walk that stops when the page is full."""
        out: list[QueueRow] = []
        start = QUEUE_ORDER.index(after.state) if after is not None else 0
        for state in QUEUE_ORDER[start:]:
            want = limit - len(out)
            if want <= 0:
                break
            if after is not None and state == after.state:
                rows = await self.execute("queue_state_before", (state, after.created_at, after.id, want))
            else:
                rows = await self.execute("queue_state", (state, want))
            out += [_row(r) for r in rows]
        return out

    async def activity(
        self, agent_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[QueueRow]:
        """Recorded sends (queued, sent, failed, rejected), newest first, optionally one
        agent's; `before` is the (created_at, id) of the previous page's last row."""
        at, ident = before if before is not None else (float("inf"), "")
        if agent_id is None:
            rows = await self.execute("activity", (at, ident, limit))
        else:
            rows = await self.execute("activity_of", (at, ident, agent_id, limit))
        return [_row(r) for r in rows]

    async def approve(self, send_id: str, by: str, now: float) -> bool:
        return bool(await self.execute("approve", (by, now, now, send_id)))

    async def reject(self, send_id: str, by: str, reason: str, now: float) -> bool:
        return bool(await self.execute("reject", (by, now, now, reason, send_id)))

    async def finish(self, send_id: str, state: QueueState, message_id: str | None, reason: str,
                     now: float) -> bool:
        return bool(await self.execute("finish", (state, message_id, reason, now, send_id)))

    async def reclaim(self, send_id: str, now: float, older_than: float) -> bool:
        return bool(await self.execute("reclaim", (now, now, send_id, older_than)))

    async def claim(
        self, agent_id: str, kind: str, key: str, send_id: str, now: float, older_than: float
    ) -> bool:
        """Take the (agent, kind, key) claim for `send_id` (see the SQL above)."""
        stmt = "claim_msgid" if kind == "msgid" else "claim_fp"
        return bool(await self.execute(stmt, (agent_id, key, send_id, now, older_than)))

    async def claim_holder(self, agent_id: str, kind: str, key: str) -> str | None:
        rows = await self.execute("claim_holder", (agent_id, kind, key))
        return str(rows[0]["send_id"]) if rows else None

    async def release(self, agent_id: str, kind: str, key: str, send_id: str) -> None:
        await self.execute("release", (agent_id, kind, key, send_id))

    async def put_outcome(self, send_id: str, state: str, message_id: str | None, detail: str,
                          now: float) -> None:
        await self.execute("put_outcome", (send_id, state, message_id, detail, now))

    async def get_outcome(self, send_id: str) -> tuple[str, str | None, str] | None:
        rows = await self.execute("get_outcome", (send_id,))
        if not rows:
            return None
        row = rows[0]
        return row["state"], row["message_id"], row["detail"]


class SqliteStore(EnforcerStore):
    """SQLite in WAL mode. Statements run on the event loop's thread: each is a short
    autocommit statement, and the conditional writes carry the correctness, not locking."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.instance = uuid.uuid4().hex
        self._conn: sqlite3.Connection | None = None
        self._checkpointer: Checkpointer | None = None
        self._liveness = FileLiveness(self.path + "-wallet-locks", self.instance)
        self._columns: dict[str, dict[str, int]] = {}  # statement -> column index (fetch)

    async def open(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            migrate_sqlite(conn, SEND_MIGRATIONS, _now())
            if not self._in_memory():  # checkpoints (and their fsyncs) off the loop's thread
                conn.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
                self._liveness.hold()
                self._checkpointer = Checkpointer(self.path)
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite open failed: {exc}") from exc
        self._conn = conn

    def _in_memory(self) -> bool:
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    async def close(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.stop()
            self._checkpointer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._liveness.release()

    async def execute_sql(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        if self._conn is None:
            raise StoreError("store is not open")
        try:
            return [tuple(r) for r in self._conn.execute(sql, tuple(params)).fetchall()]
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc}") from exc

    async def fetch(self, sql: str, params: Sequence[Any]) -> list[NamedRow]:
        if self._conn is None:
            raise StoreError("store is not open")
        try:
            cur = self._conn.execute(sql, tuple(params))
            rows = cur.fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc}") from exc
        if not rows:
            return []
        # Records over an index of the statement's columns, made once per statement text:
        # sqlite3.Row finds a name by a case-insensitive scan of every column (a 26-column
        # intent read whole: 10.0 us against 8.0 us, and 5.3 us as bare tuples).
        index = self._columns.get(sql)
        if index is None or len(index) != len(cur.description):
            index = columns(cur.description)
            if len(self._columns) < 1024:  # the store's statements, and a few raw ones
                self._columns[sql] = index
        return [Record(r, index) for r in rows]

    async def migrate(self, migrations: Migrations) -> int:
        if self._conn is None:
            raise StoreError("store is not open")
        try:
            return migrate_sqlite(self._conn, migrations, _now())
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite migration of {migrations.component}: {exc}") from exc

    async def transaction(
        self, steps: Sequence[Step], *, require_rows: bool = False, durable: bool = True
    ) -> Batch:
        # Synchronous from BEGIN to COMMIT: no other task's statement can land inside it
        # on this shared connection.
        conn = self._conn
        if conn is None:
            raise StoreError("store is not open")
        out: list[list[tuple[Any, ...]]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for n, (sql, params) in enumerate(steps):
                    rows = [tuple(r) for r in conn.execute(sql, tuple(params)).fetchall()]
                    if require_rows and not rows:
                        conn.execute("ROLLBACK")
                        return Batch(out, n)
                    out.append(rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite: {exc}") from exc
        return Batch(out)

    def wallet_lock(self, name: str) -> AbstractAsyncContextManager[None]:
        if self._in_memory():
            return nullcontext()  # no other process can open this store
        return file_lock(self.path + "-wallet-locks", name)

    async def alive(self, instance: str) -> bool:
        if self._in_memory():  # no other process can open this store
            return instance == self.instance and self._conn is not None
        return self._liveness.alive(instance)


class PostgresStore(EnforcerStore):
    """PostgreSQL through a psycopg async pool; every statement autocommits."""

    def __init__(self, dsn: str, *, max_size: int = 10) -> None:
        self.dsn = dsn
        self.max_size = max(2, max_size)  # a wallet-lock holder pins one, its statements need another
        self._pool: Any = None
        # A held wallet lock pins a pooled connection; at most half the pool does, so the
        # holders' own statements always find a connection.
        self._lock_slots = asyncio.Semaphore(self.max_size // 2)
        self.instance = uuid.uuid4().hex
        self._liveness = PgLiveness(dsn, self.instance)

    async def open(self) -> None:
        # lazy: keeps psycopg, psycopg_pool off this module's import
        import psycopg
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(
            self.dsn, min_size=1, max_size=self.max_size, kwargs={"autocommit": True}, open=False
        )
        try:
            await pool.open(wait=True, timeout=30)
            # One transaction under the migrator's advisory lock: concurrent first opens
            # would otherwise race on CREATE TABLE IF NOT EXISTS.
            await asyncio.to_thread(migrate_postgres, self.dsn, SEND_MIGRATIONS, _now())
            await self._liveness.hold()
        except (psycopg.Error, OSError) as exc:
            await pool.close()
            raise StoreError(f"postgres open failed: {exc}") from exc
        except Exception:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        await self._liveness.release()

    async def execute(self, name: str, params: Sequence[Any]) -> list[NamedRow]:
        return await self.fetch(_PG_SQL.get(name) or _SQL[name], params)

    async def fetch(self, sql: str, params: Sequence[Any]) -> list[NamedRow]:
        # lazy: keeps psycopg off this module's import
        import psycopg

        if self._pool is None:
            raise StoreError("store is not open")
        try:
            async with self._pool.connection() as conn, conn.cursor(row_factory=named_row) as cur:
                await cur.execute(sql.replace("?", "%s"), tuple(params))
                if cur.description is None:
                    return []
                rows: list[NamedRow] = await cur.fetchall()
                return rows
        except psycopg.Error as exc:
            raise StoreError(f"postgres: {exc}") from exc

    async def migrate(self, migrations: Migrations) -> int:
        import psycopg  # lazy: keeps psycopg off this module's import

        if self._pool is None:
            raise StoreError("store is not open")
        try:
            return await asyncio.to_thread(migrate_postgres, self.dsn, migrations, _now())
        except psycopg.Error as exc:
            raise StoreError(f"postgres migration of {migrations.component}: {exc}") from exc

    async def execute_sql(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        import psycopg  # lazy: keeps psycopg off this module's import

        if self._pool is None:
            raise StoreError("store is not open")
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql.replace("?", "%s"), tuple(params))
                if cur.description is None:
                    return []
                return [tuple(r) for r in await cur.fetchall()]
        except psycopg.Error as exc:
            raise StoreError(f"postgres: {exc}") from exc

    async def transaction(
        self, steps: Sequence[Step], *, require_rows: bool = False, durable: bool = True
    ) -> Batch:
        import psycopg  # lazy: keeps psycopg off this module's import

        if self._pool is None:
            raise StoreError("store is not open")
        out: list[list[tuple[Any, ...]]] = []
        refused: int | None = None
        try:
            # Pipelined: BEGIN, every statement and COMMIT travel together (one round
            # trip); with require_rows the COMMIT or ROLLBACK waits for the rows (two).
            # Statements after a refused one still run; the rollback undoes them.
            async with self._pool.connection() as conn:
                async with conn.pipeline() as pipe, conn.transaction() as tx:
                    if not durable:
                        await conn.execute("SET LOCAL synchronous_commit = off")
                    cursors = [await conn.execute(sql.replace("?", "%s"), tuple(p)) for sql, p in steps]
                    if require_rows:
                        await pipe.sync()
                        for cur in cursors:
                            rows = await cursor_rows(cur)
                            if not rows:
                                refused = len(out)
                                raise psycopg.Rollback(tx)
                            out.append(rows)
                if not require_rows:  # the pipeline's end brought every result
                    out = [await cursor_rows(cur) for cur in cursors]
        except psycopg.Error as exc:
            raise StoreError(f"postgres: {exc}") from exc
        return Batch(out, refused)

    def wallet_lock(self, name: str) -> AbstractAsyncContextManager[None]:
        if self._pool is None:
            raise StoreError("store is not open")
        return pg_advisory_lock(self._pool, name, self._lock_slots)

    async def alive(self, instance: str) -> bool:
        if self._pool is None:
            raise StoreError("store is not open")
        return await self._liveness.alive(self._pool, instance)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def open_store(url: str) -> SqliteStore | PostgresStore:
    """`sqlite:///path/to/file.db`, a bare path, or `postgresql://...` (not yet opened)."""
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresStore(url)
    if url.startswith("sqlite:///"):
        return SqliteStore(url[len("sqlite:///") :])  # sqlite:///rel.db, sqlite:////abs/path.db
    if "://" in url:
        raise ConfigError(f"unsupported store URL: {url!r} (use sqlite:///PATH or postgresql://...)")
    return SqliteStore(url)
