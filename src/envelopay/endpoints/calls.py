"""Client calls to email-as-tool endpoints (seeds/email-as-tool-endpoints.txt).

``await client.call(address, request, timeout=...)`` sends one request mail and waits
for the reply; ``await client.send(...)`` is the non-blocking form and returns the
request's Message-ID. Every outstanding call is persisted BEFORE the mail leaves
(call id → Message-ID → deadline), so a restart loses nothing: a later process can
match the reply (by In-Reply-To) or time the call out. Each call starts a fresh
Message-ID chain. Reply payloads are data: they are returned, never interpreted.

Results are values::

    CallResult(status="ok", result={...})
    CallResult(status="error", error={"code": "invalid_field", ...})
    CallResult(status="timeout", error={"code": "timeout", "deadline": "..."})
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

from envelopay.endpoints.toolmail import build_tool_mail, read_in_reply_to, read_tool_mail
from envelopay.errors import TransportError, UsageError
from envelopay.ledger.store import CallRecord as LedgerRecord

__all__ = [
    "CallBook",
    "CallClient",
    "CallRecord",
    "CallResult",
    "CallStore",
    "LedgerCalls",
    "Sender",
    "settle_reply",
]

CallStatus = Literal["pending", "ok", "error", "timeout", "failed"]
Sender = Callable[[bytes, str, str], Awaitable[None]]  # (raw, from, to)
Clock = Callable[[], datetime]


@dataclass(frozen=True, slots=True)
class CallResult:
    call_id: str
    status: CallStatus
    result: Any = None
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True, slots=True)
class CallRecord:
    call_id: str
    message_id: str
    endpoint: str
    deadline: datetime
    status: CallStatus
    reply: dict[str, Any] | None = field(default=None)

    def result(self) -> CallResult:
        reply = self.reply or {}
        if self.status == "ok":
            return CallResult(self.call_id, "ok", reply.get("result"))
        err = reply.get("error")
        error = err if isinstance(err, dict) else {"code": self.status}
        return CallResult(self.call_id, self.status, None, error)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_calls (
    call_id    TEXT PRIMARY KEY,
    message_id TEXT NOT NULL UNIQUE,
    endpoint   TEXT NOT NULL,
    deadline   TEXT NOT NULL,
    status     TEXT NOT NULL,
    reply      TEXT,
    created    TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS agent_calls_pending ON agent_calls (status, deadline);
"""


class CallStore:
    """Outstanding calls in SQLite (the agent's ledger file; table prefix agent_)."""

    def __init__(self, path: str | Path) -> None:
        self._path = str(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self._path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.row_factory = sqlite3.Row  # rows by column name (envelopay.persist)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _row(r: sqlite3.Row) -> CallRecord:
        reply = json.loads(r["reply"]) if r["reply"] else None
        return CallRecord(r["call_id"], r["message_id"], r["endpoint"], datetime.fromisoformat(r["deadline"]),
                          r["status"], reply)

    def add(self, call_id: str, message_id: str, endpoint: str, deadline: datetime, now: datetime) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO agent_calls (call_id, message_id, endpoint, deadline, status, reply, created)"
                " VALUES (?, ?, ?, ?, 'pending', NULL, ?)",
                (call_id, message_id, endpoint, deadline.isoformat(), now.isoformat()),
            )

    def get(self, call_id: str) -> CallRecord | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM agent_calls WHERE call_id = ?", (call_id,)).fetchone()
        return self._row(r) if r else None

    def by_message_id(self, message_id: str) -> CallRecord | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM agent_calls WHERE message_id = ?", (message_id,)).fetchone()
        return self._row(r) if r else None

    def finish(self, call_id: str, status: CallStatus, reply: dict[str, Any] | None) -> bool:
        """Pending → final, once (a single conditional write; a late reply changes nothing)."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE agent_calls SET status = ?, reply = ? WHERE call_id = ? AND status = 'pending'",
                (status, json.dumps(reply) if reply is not None else None, call_id),
            )
        return cur.rowcount == 1

    def pending(self) -> list[CallRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM agent_calls WHERE status = 'pending'").fetchall()
        return [self._row(r) for r in rows]

    def expire(self, now: datetime) -> list[str]:
        """Time out every pending call whose deadline has passed; return their ids."""
        expired = []
        for rec in self.pending():
            if rec.deadline <= now:
                err = {"error": {"code": "timeout", "deadline": rec.deadline.isoformat()}}
                if self.finish(rec.call_id, "timeout", err):
                    expired.append(rec.call_id)
        return expired


class CallBook(Protocol):
    """Where outstanding calls live: `CallStore` (a SQLite file of the agent's own) or
    `LedgerCalls` (the engine's ledger: SQLite or PostgreSQL)."""

    def add(
        self, call_id: str, message_id: str, endpoint: str, deadline: datetime, now: datetime
    ) -> None: ...

    def get(self, call_id: str) -> CallRecord | None: ...

    def by_message_id(self, message_id: str) -> CallRecord | None: ...

    def finish(self, call_id: str, status: CallStatus, reply: dict[str, Any] | None) -> bool: ...

    def pending(self) -> list[CallRecord]: ...

    def expire(self, now: datetime) -> list[str]: ...


class LedgerCalls:
    """Outstanding calls in the engine's ledger (`Store.call_*`, table ep_calls), so a
    PostgreSQL-backed agent keeps them beside its flows. Our ok/error map to the
    ledger's `answered` with the reply kept as the result."""

    def __init__(self, store: Any, *, local: str, clock: Clock = lambda: datetime.now(UTC)) -> None:
        self.store = store
        self.local = local.lower()
        self.clock = clock

    @staticmethod
    def _rec(r: Any) -> CallRecord:
        result = dict(r.result) if r.result is not None else None
        if r.status == "answered":
            status: CallStatus = "ok" if (result or {}).get("status") == "ok" else "error"
        else:
            status = r.status
        return CallRecord(r.call_id, r.message_id, r.peer, r.deadline, status, result)

    def add(self, call_id: str, message_id: str, endpoint: str, deadline: datetime, now: datetime) -> None:
        self.store.call_add(LedgerRecord(call_id=call_id, local=self.local, peer=endpoint,
                                         message_id=message_id, deadline=deadline, created_at=now))

    def get(self, call_id: str) -> CallRecord | None:
        r = self.store.call_get(call_id)
        return self._rec(r) if r is not None else None

    def by_message_id(self, message_id: str) -> CallRecord | None:
        r = self.store.call_for_reply(self.local, message_id)
        return self._rec(r) if r is not None else None

    def finish(self, call_id: str, status: CallStatus, reply: dict[str, Any] | None) -> bool:
        ledger_status = "answered" if status in ("ok", "error") else status
        result = {"status": status, **(reply or {})}
        return bool(self.store.call_resolve(call_id, ledger_status, result, self.clock()))

    def pending(self) -> list[CallRecord]:
        return [self._rec(r) for r in self.store.calls_pending(self.local)]

    def expire(self, now: datetime) -> list[str]:
        return [r.call_id for r in self.store.calls_expire(now)]


class CallClient:
    """Send tool calls and match their replies. Transport and clock are injected."""

    def __init__(
        self,
        store: CallBook,
        *,
        address: str,
        domain: str,
        send: Sender,
        clock: Clock = lambda: datetime.now(UTC),
        token: Callable[[int], str] = secrets.token_hex,
        poll_interval: float = 0.05,
    ) -> None:
        self.store = store
        self.address = address
        self.domain = domain
        self._send = send
        self._clock = clock
        self._token = token
        self._poll = poll_interval
        self._waiters: dict[str, asyncio.Future[CallResult]] = {}

    async def send(self, endpoint: str, request: dict[str, Any], *, timeout: float = 60.0) -> tuple[str, str]:
        """Record then send one request; return (call_id, Message-ID) without waiting."""
        if not isinstance(request, dict):
            raise UsageError("request must be a JSON object")
        if timeout <= 0:
            raise UsageError("timeout must be positive")
        try:
            json.dumps(request, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"request is not JSON data: {exc}") from exc
        now = self._clock()
        call_id = f"call_{self._token(8)}"
        message_id = f"<{call_id}.{self._token(4)}@{self.domain}>"
        raw = build_tool_mail(
            sender=self.address,
            recipient=endpoint,
            subject=f"CALL {endpoint.split('@')[0]}",
            payload=request,
            human=f"Tool call {call_id} to {endpoint}; the request is the application/json part.\n",
            message_id=message_id,
            now=now,
            call_id=call_id,
        )
        # Persist first: a crash after sending still leaves a record to match or time out.
        self.store.add(call_id, message_id, endpoint, now + timedelta(seconds=timeout), now)
        try:
            await self._send(raw, self.address, endpoint)
        except TransportError as exc:
            self.store.finish(call_id, "failed", {"error": {"code": "send_failed", "detail": str(exc)}})
            raise
        return call_id, message_id

    async def call(self, endpoint: str, request: dict[str, Any], *, timeout: float = 60.0) -> CallResult:
        call_id, _ = await self.send(endpoint, request, timeout=timeout)
        return await self.wait(call_id)

    async def wait(self, call_id: str) -> CallResult:
        """Wait for a call's reply or its deadline (the reply may be fed by another task)."""
        rec = self.store.get(call_id)
        if rec is None:
            raise UsageError(f"no call {call_id!r}")
        loop = asyncio.get_running_loop()
        fut = self._waiters.setdefault(call_id, loop.create_future())
        try:
            while True:
                rec = self.store.get(call_id)
                assert rec is not None
                if rec.status != "pending":
                    return rec.result()
                if self._clock() >= rec.deadline and self.store.expire(self._clock()):
                    continue
                # Woken early by on_reply in this process; else poll (reply from elsewhere).
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), self._poll)
                except TimeoutError:
                    continue
        finally:
            self._waiters.pop(call_id, None)

    def on_reply(self, raw: bytes) -> CallResult | None:
        """Feed one inbound mail; if it answers an outstanding call, settle that call
        (settle_reply) and wake its waiter in this process."""
        settled = settle_reply(self.store, raw)
        if settled is None:
            return None
        call_id, out = settled
        fut = self._waiters.get(call_id)
        if fut is not None and not fut.done():
            fut.set_result(out)
        return out


def settle_reply(store: CallBook, raw: bytes) -> tuple[str, CallResult] | None:
    """If `raw` answers an outstanding call in `store`, settle it: (call id, result).

    Matching is by In-Reply-To only, and the reply must come from the endpoint the call was
    sent to. The payload is kept as data. Any process reading the caller's mail may settle
    it — `worker serve` too, when the caller is the served address — and a waiter elsewhere
    reads the settled call from the store."""
    # The header block first: nearly every reply a node takes in answers no call of
    # ours, and the whole mail is parsed only for one that does.
    in_reply_to = read_in_reply_to(raw)
    if in_reply_to is None:
        return None
    rec = store.by_message_id(in_reply_to)
    if rec is None:
        return None
    mail = read_tool_mail(raw)
    if mail.sender != rec.endpoint:
        return None
    payload = mail.payload
    if payload is None:
        reply: dict[str, Any] = {"error": {"code": "bad_reply", "detail": mail.problem}}
        status: CallStatus = "error"
    elif payload.get("status") == "ok":
        reply, status = {"result": payload.get("result")}, "ok"
    else:
        err = payload.get("error")
        reply = {"error": err if isinstance(err, dict) else {"code": "bad_reply"}}
        status = "error"
    if not store.finish(rec.call_id, status, reply):
        return None  # already settled (late or duplicate reply)
    result = store.get(rec.call_id)
    assert result is not None
    return rec.call_id, result.result()
