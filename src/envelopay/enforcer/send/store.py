"""Durable enforcer state on SQLite (embedded) or PostgreSQL, in `enf_`-prefixed tables so
it can share a database with the ledger.

Every cap and every queue decision is ONE conditional statement; nothing here reads a
value and writes it back. Database faults surface as StoreError (the enforcer turns them
into `failed`); a condition that did not hold is a plain False / None. The statements are
in schema.py, the two backends in backends.py.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

from envelopay.enforcer.common.batch import Batch, Step
from envelopay.enforcer.common.rows import first, newest_first
from envelopay.enforcer.send.model import Agent, Policy, QueueRow, QueueState, RefusedRequest, SendRequest
from envelopay.enforcer.send.schema import SQL
from envelopay.persist import Migrations, NamedRow

__all__ = ["QUEUE_ORDER", "EnforcerStore", "QueueCursor", "agent_row"]



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


def _refusal(row: NamedRow) -> RefusedRequest:
    return RefusedRequest(
        id=row["id"], agent_id=row["agent_id"], side=row["side"], operation=row["operation"],
        code=row["code"], reason=row["reason"], summary=row["summary"],
        created_at=float(row["created_at"]), agent_name=row["agent_name"] or "",
    )


REFUSAL_TEXT = 300  # characters of a refusal's reason and summary kept


def _storable(text: str, limit: int) -> str:
    """Text from a refused request as both databases store it: a lone surrogate or a NUL
    (what some refusals are about) written as its escape, cut to `limit` characters."""
    clean = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    return clean[:limit]


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
        return await self.fetch(SQL[name], params)

    @abstractmethod
    async def migrate(self, migrations: Migrations) -> int:
        """Bring one component's tables (this store's, or the spend side's on the same
        database) to their latest version with the one migrator; the version now."""

    @staticmethod
    def step(name: str, params: Sequence[Any]) -> Step:
        """One named statement of this store, for `transaction`."""
        return SQL[name], params

    @staticmethod
    def send_step(
        *, id: str, agent_id: str, state: QueueState, reason: str, request: SendRequest,
        fingerprint: str, message_id: str | None, now: float,
    ) -> Step:
        return SQL["insert_send"], (
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
        return first(await self.execute("agent_by_token", (token_hash,)), agent_row)

    async def agent_by_name(self, name: str) -> Agent | None:
        return first(await self.execute("agent_by_name", (name,)), agent_row)

    async def agent_by_id(self, agent_id: str) -> Agent | None:
        return first(await self.execute("agent_by_id", (agent_id,)), agent_row)

    async def list_agents(self, limit: int = 1000, after: str | None = None) -> list[Agent]:
        """Agents by name, one page: those after `after` (the previous page's last name)."""
        if after is None:
            rows = await self.execute("list_agents", (limit,))
        else:
            rows = await self.execute("list_agents_after", (after, limit))
        return [agent_row(r) for r in rows]

    async def kill_agent(self, name: str) -> Agent | None:
        return first(await self.execute("kill", (name,)), agent_row)

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
        return first(await self.execute("get_send", (send_id,)), _row)

    async def send_by_message_id(self, agent_id: str, message_id: str) -> QueueRow | None:
        return first(await self.execute("send_by_message_id", (agent_id, message_id)), _row)

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
        return [_row(r) for r in await self.execute(*newest_first("activity", agent_id, limit, before))]

    async def record_refusal(self, r: RefusedRequest) -> None:
        """Keep a refused request for the activity page (the side that refused writes it)."""
        await self.execute(
            "insert_refusal",
            (r.id, r.agent_id, r.side, _storable(r.operation, 64), _storable(r.code, 64),
             _storable(r.reason, REFUSAL_TEXT), _storable(r.summary, REFUSAL_TEXT), r.created_at),
        )

    async def refusals(
        self, agent_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[RefusedRequest]:
        """Refused requests, newest first, optionally one agent's; `before` as activity's."""
        return [_refusal(r) for r in await self.execute(*newest_first("refusals", agent_id, limit, before))]

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
