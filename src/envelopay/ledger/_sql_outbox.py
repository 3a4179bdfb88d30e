"""The outbox, transport-event and email-as-tool call queries of `SqlStore`, shared by
the SQLite and PostgreSQL backends (split from `_sql.py` to keep each module readable in
one sitting). Same conventions: `?` placeholders, single conditional writes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from envelopay.ledger._sql_base import Row, SqlBase
from envelopay.ledger.store import CallRecord, CallStatus, OutboxRow, outbound_from_row

__all__ = ["OutboxCallsMixin"]

_OUTBOX_COLS = (
    "message_id, flow_id, sender, recipient, type, body, date, in_reply_to, refs, note, status, attempts, "
    "created_at, next_attempt, sent_at, last_error, bounce_status, auto_submitted"
)
_CALL_COLS = "call_id, local, peer, message_id, deadline, status, request, result, created_at, resolved_at"


class OutboxCallsMixin(SqlBase):
    """The outbox, event and call queries over a SqlStore's executor and codecs."""

    skip_locked: str  # the backend's row-claim clause (SqlStore)

    def _outbox(self, row: Row) -> OutboxRow:
        ob = outbound_from_row(
            message_id=row["message_id"],
            sender=row["sender"],
            recipient=row["recipient"],
            type=row["type"],
            body=self.uj(row["body"]),
            date=self.ut(row["date"]),
            in_reply_to=row["in_reply_to"],
            refs=self.uj(row["refs"]),
            note=row["note"],
            auto_submitted=row["auto_submitted"],
        )
        return OutboxRow(
            outbound=ob,
            flow_id=row["flow_id"],
            status=row["status"],
            attempts=int(row["attempts"]),
            created_at=self.ut(row["created_at"]),
            next_attempt=self.ut_opt(row["next_attempt"]),
            sent_at=self.ut_opt(row["sent_at"]),
            last_error=row["last_error"],
            bounce_status=row["bounce_status"],
        )

    def _call(self, row: Row) -> CallRecord:
        return CallRecord(
            call_id=row["call_id"],
            local=row["local"],
            peer=row["peer"],
            message_id=row["message_id"],
            deadline=self.ut(row["deadline"]),
            status=row["status"],
            request=self.uj(row["request"]),
            result=self.uj_opt(row["result"]),
            created_at=self.ut_opt(row["created_at"]),
            resolved_at=self.ut_opt(row["resolved_at"]),
        )

    def outbox_pending(self, now: datetime, limit: int = 100) -> list[OutboxRow]:
        with self.read() as x:
            rows = x.all(
                f"SELECT {_OUTBOX_COLS} FROM ep_outbox WHERE status = 'pending'"
                " AND (next_attempt IS NULL OR next_attempt <= ?) ORDER BY seq LIMIT ?",
                (self.t(now), limit),
            )
        return [self._outbox(r) for r in rows]

    def outbox_held(self, local: str, limit: int = 100) -> list[OutboxRow]:
        with self.read() as x:
            rows = x.all(
                f"SELECT {_OUTBOX_COLS} FROM ep_outbox WHERE status = 'held' AND sender = ?"
                " ORDER BY seq DESC LIMIT ?",
                (local, limit),
            )
        return [self._outbox(r) for r in rows]

    def outbox_claim(
        self, owner: str, now: datetime, lease_until: datetime, limit: int = 100
    ) -> list[OutboxRow]:
        """Claim the due rows for `owner` until `lease_until`, in one conditional UPDATE:
        a row is claimable when pending, due, and not under another live claim, and no
        earlier row of its flow is under another drainer's live claim (a flow's rows
        go out in order). Two drainers never hold one row at once; at most `limit` rows.

        The rows are picked in a MATERIALIZED CTE, not in `seq IN (SELECT ... LIMIT ?
        FOR UPDATE SKIP LOCKED)`: PostgreSQL may plan that IN as a semi-join whose inner
        side is rescanned per outer row, and each rescan locks the next unlocked rows, so
        one UPDATE claimed many times `limit` under concurrency
        (tests/ledger/test_outbox_claim_race.py). A materialized CTE runs once. SQLite never
        had the issue (one writer at a time, and an uncorrelated IN list is built once);
        it reads the same statement (MATERIALIZED since 3.35)."""
        n = self.t(now)
        with self.write() as x:
            rows = x.all(
                "WITH picked AS MATERIALIZED (SELECT o.seq FROM ep_outbox o"
                " WHERE o.status = 'pending' AND (o.next_attempt IS NULL OR o.next_attempt <= ?)"
                " AND (o.claim_until IS NULL OR o.claim_until <= ? OR o.claimed_by = ?)"
                " AND NOT EXISTS (SELECT 1 FROM ep_outbox e WHERE e.flow_id = o.flow_id AND e.seq < o.seq"
                " AND e.status = 'pending' AND e.claimed_by <> ? AND e.claim_until > ?)"
                f" ORDER BY o.seq LIMIT ?{self.skip_locked})"
                " UPDATE ep_outbox SET claimed_by = ?, claim_until = ?"
                " WHERE seq IN (SELECT seq FROM picked) AND status = 'pending'"
                " AND (next_attempt IS NULL OR next_attempt <= ?)"
                " AND (claim_until IS NULL OR claim_until <= ? OR claimed_by = ?)"
                f" RETURNING {_OUTBOX_COLS}, seq",
                (n, n, owner, owner, n, limit, owner, self.t(lease_until), n, n, owner),
            )
        rows.sort(key=lambda r: int(r["seq"]))
        return [self._outbox(r) for r in rows]

    def outbox_claimable(self, owner: str, now: datetime, limit: int) -> list[str]:
        n = self.t(now)
        with self.read() as x:
            rows = x.all(
                "SELECT message_id FROM ep_outbox WHERE status = 'pending'"
                " AND (next_attempt IS NULL OR next_attempt <= ?)"
                " AND (claim_until IS NULL OR claim_until <= ? OR claimed_by = ?) ORDER BY seq LIMIT ?",
                (n, n, owner, limit),
            )
        return [r["message_id"] for r in rows]

    def outbox_claim_one(
        self, message_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> OutboxRow | None:
        """Claim one row for `owner` (a send delivering its own row beside a drain), in one
        conditional UPDATE: only when pending, due, under no live claim (its owner's own
        either: a drain of this process may hold it), and first of its flow's pending rows
        (a flow's rows go out in order). None: the drain's to send."""
        n = self.t(now)
        with self.write() as x:
            rows = x.all(  # all(): the RETURNING statement runs to its end on SQLite
                "UPDATE ep_outbox SET claimed_by = ?, claim_until = ?"
                " WHERE message_id = ? AND status = 'pending' AND (next_attempt IS NULL OR next_attempt <= ?)"
                " AND (claim_until IS NULL OR claim_until <= ?)"
                " AND NOT EXISTS (SELECT 1 FROM ep_outbox e WHERE e.flow_id = ep_outbox.flow_id"
                " AND e.seq < ep_outbox.seq AND e.status = 'pending')"
                f" RETURNING {_OUTBOX_COLS}",
                (owner, self.t(lease_until), message_id, n, n),
            )
        return self._outbox(rows[0]) if rows else None

    def outbox_expedite(self) -> int:
        with self.write() as x:
            return x.exec("UPDATE ep_outbox SET next_attempt = NULL"
                          " WHERE status = 'pending' AND next_attempt IS NOT NULL")

    def outbox_release(self, message_id: str, owner: str) -> bool:
        """Give a claimed row back unsent (the drainer stopped before sending it)."""
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_outbox SET claimed_by = NULL, claim_until = NULL"
                " WHERE message_id = ? AND claimed_by = ?",
                (message_id, owner),
            )
        return n > 0

    def outbox_get(self, message_id: str) -> OutboxRow | None:
        with self.read() as x:
            row = x.one(f"SELECT {_OUTBOX_COLS} FROM ep_outbox WHERE message_id = ?", (message_id,))
        return self._outbox(row) if row else None

    def mark_sent(self, message_id: str, now: datetime) -> bool:
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_outbox SET status = 'sent', sent_at = ?, attempts = attempts + 1,"
                " next_attempt = NULL, claimed_by = NULL, claim_until = NULL"
                " WHERE message_id = ?",
                (self.t(now), message_id),
            )
        return n > 0

    def mark_failed(
        self, message_id: str, now: datetime, error: str, retry_at: datetime | None = None
    ) -> bool:
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_outbox SET status = ?, attempts = attempts + 1, last_error = ?, next_attempt = ?,"
                " claimed_by = NULL, claim_until = NULL WHERE message_id = ?",
                ("pending" if retry_at is not None else "failed", error[:2000], self.t(retry_at), message_id),
            )
        return n > 0

    def mark_bounced(self, message_id: str, now: datetime, status: str, detail: str) -> bool:
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_outbox SET status = 'bounced', bounce_status = ?, last_error = ?,"
                " next_attempt = NULL WHERE message_id = ? AND status <> 'bounced'",
                (status[:32], detail[:2000], message_id),
            )
        return n > 0

    # -- transport events
    def event_done(
        self, source: str, event_id: str, now: datetime, data: Mapping[str, Any] | None = None
    ) -> bool:
        with self.write() as x:
            n = x.exec(
                "INSERT INTO ep_events (source, event_id, done_at, data) VALUES (?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                (source, event_id, self.t(now), None if data is None else self.j(data)),
            )
        return n > 0

    def event_data(self, source: str, event_id: str) -> Mapping[str, Any] | None:
        with self.read() as x:
            row = x.one("SELECT data FROM ep_events WHERE source = ? AND event_id = ?", (source, event_id))
        if row is None or row["data"] is None:
            return None
        data = self.uj(row["data"])
        return data if isinstance(data, dict) else None

    def event_seen(self, source: str, event_id: str) -> bool:
        with self.read() as x:
            row = x.one("SELECT 1 FROM ep_events WHERE source = ? AND event_id = ?", (source, event_id))
        return row is not None

    # -- calls
    def call_add(self, call: CallRecord) -> None:
        with self.write() as x:
            x.exec(
                f"INSERT INTO ep_calls ({_CALL_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    call.call_id,
                    call.local.lower(),
                    call.peer.lower(),
                    call.message_id,
                    self.t(call.deadline),
                    call.status,
                    self.j(dict(call.request)),
                    self.j(dict(call.result)) if call.result is not None else None,
                    self.t(call.created_at or call.deadline),
                    self.t(call.resolved_at),
                ),
            )

    def call_get(self, call_id: str) -> CallRecord | None:
        with self.read() as x:
            row = x.one(f"SELECT {_CALL_COLS} FROM ep_calls WHERE call_id = ?", (call_id,))
        return self._call(row) if row else None

    def call_for_reply(self, local: str, in_reply_to: str) -> CallRecord | None:
        with self.read() as x:
            row = x.one(
                f"SELECT {_CALL_COLS} FROM ep_calls WHERE local = ? AND message_id = ?",
                (local.lower(), in_reply_to),
            )
        return self._call(row) if row else None

    def call_resolve(
        self, call_id: str, status: CallStatus, result: Mapping[str, Any] | None, now: datetime
    ) -> bool:
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_calls SET status = ?, result = ?, resolved_at = ? WHERE call_id = ?"
                " AND status = 'pending'",
                (status, self.j(dict(result)) if result is not None else None, self.t(now), call_id),
            )
        return n > 0

    def calls_pending(self, local: str | None = None) -> list[CallRecord]:
        with self.read() as x:
            if local is None:
                rows = x.all(f"SELECT {_CALL_COLS} FROM ep_calls WHERE status = 'pending' ORDER BY deadline")
            else:
                rows = x.all(
                    f"SELECT {_CALL_COLS} FROM ep_calls WHERE status = 'pending' AND local = ?"
                    " ORDER BY deadline",
                    (local.lower(),),
                )
        return [self._call(r) for r in rows]

    def calls_expire(self, now: datetime) -> list[CallRecord]:
        with self.write() as x:
            rows = x.all(
                f"UPDATE ep_calls SET status = 'timeout', resolved_at = ? WHERE status = 'pending'"
                f" AND deadline < ? RETURNING {_CALL_COLS}",
                (self.t(now), self.t(now)),
            )
        return [self._call(r) for r in rows]
