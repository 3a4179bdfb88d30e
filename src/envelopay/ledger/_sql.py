"""The Store logic shared by the SQLite and PostgreSQL backends.

Statements are written once with `?` placeholders; a backend supplies the executor,
the placeholder style, the row locking clause and the value adapters (SQLite keeps
times and JSON as text, PostgreSQL as timestamptz and jsonb). Reservations are single
conditional writes (INSERT ... ON CONFLICT DO NOTHING RETURNING), so two processes
racing for one Message-ID, one (sender, id) or one proof see exactly one winner.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from envelopay.ledger._sql_base import Executor, Row, SqlBase
from envelopay.ledger._sql_jobs import JobsMixin
from envelopay.ledger._sql_outbox import OutboxCallsMixin
from envelopay.ledger.compacted import same_content, small
from envelopay.ledger.store import (
    AnswerLimits,
    AnswerVerdict,
    Begin,
    Claim,
    Commit,
    CommitResult,
    FlowRecord,
    LogEntry,
    ProofKey,
    outbound_to_row,
)
from envelopay.ledger.summaries import SummariesMixin
from envelopay.ledger.waiting import WaitingMixin

__all__ = ["Abort", "Executor", "Row", "SqlStore", "dumps", "iter_chunks"]


class Abort(Exception):
    """Roll the current write transaction back and report `result`."""

    def __init__(self, result: CommitResult) -> None:
        super().__init__(result)
        self.result = result


_FLOW_COLS = (
    "f.flow_id, f.local, f.peer, f.kind, f.side, f.state, f.version, f.data, f.created_at, f.updated_at"
)


class SqlStore(WaitingMixin, OutboxCallsMixin, SummariesMixin, JobsMixin, SqlBase):
    lock_clause = ""  # " FOR UPDATE" where the backend has row locks
    skip_locked = ""  # " FOR UPDATE SKIP LOCKED" where it has them (claims)

    # -- records
    def _flow(self, row: Row) -> FlowRecord:
        return FlowRecord(
            flow_id=row["flow_id"],
            local=row["local"],
            peer=row["peer"],
            kind=row["kind"],
            side=row["side"],
            state=row["state"],
            version=int(row["version"]),
            data=self.uj(row["data"]),
            created_at=self.ut(row["created_at"]),
            updated_at=self.ut(row["updated_at"]),
        )

    # -- the inbound step
    def begin_step(self, claim: Claim) -> Begin:
        c = claim
        with self.write() as x:
            got = x.one(
                "INSERT INTO ep_inbound (local, message_id, content_hash, status, worker,"
                " lease_until, created_at)"
                " VALUES (?, ?, ?, 'claimed', ?, ?, ?) ON CONFLICT DO NOTHING RETURNING status",
                (c.local, c.message_id, c.content_hash, c.worker, self.t(c.lease_until), self.t(c.now)),
            )
            if got is None:
                row = x.one(
                    "SELECT status, worker, lease_until, outcome FROM ep_inbound WHERE local ="
                    " ? AND message_id = ?" + self.lock_clause,
                    (c.local, c.message_id),
                )
                assert row is not None
                if row["status"] == "done":
                    return Begin("seen", outcome=self.uj(row["outcome"]))
                if row["worker"] != c.worker and self.ut(row["lease_until"]) > c.now:
                    return Begin("busy")
                # Our own earlier claim (a crash between the two transactions), or an
                # expired lease: take it over and redo the step.
                x.exec(
                    "UPDATE ep_inbound SET worker = ?, lease_until = ? WHERE local = ? AND message_id = ?",
                    (c.worker, self.t(c.lease_until), c.local, c.message_id),
                )
            if c.sender is not None and c.protocol_id is not None:
                early = self._reserve_id(x, c)
                if early is not None:
                    return early
            if c.proof is not None:
                got = x.one(
                    "INSERT INTO ep_proofs (chain, proof_key, owner_local, owner_message, status, created_at)"
                    " VALUES (?, ?, ?, ?, 'held', ?) ON CONFLICT DO NOTHING RETURNING status",
                    (c.proof.chain, c.proof.key, c.local, c.message_id, self.t(c.now)),
                )
                if got is None:
                    held = self._proof_held_elsewhere(x, c)
                    if held is not None:
                        return held
            ref_flows, missing = self._ref_flows(x, c)
            thread_flows = self._thread_flows(x, c)
        return Begin("new", ref_flows=ref_flows, thread_flows=thread_flows, missing_refs=missing)

    def _proof_held_elsewhere(self, x: Executor, c: Claim) -> Begin | None:
        """The proof's row exists: None if it is ours (or now ours), else the answer.

        Spent by another message: `proof_replayed`, forever, whoever presents it. Held
        by another message still being handled (its claim's lease is live): `busy`, for
        that presentation may yet fail and release it (a thief's doomed presentation
        must not make the owner's own final answer `proof_replayed`). Held by a message
        whose handler died (lease run out): taken over, and this message goes on."""
        assert c.proof is not None
        row = x.one(
            "SELECT p.owner_local, p.owner_message, p.status, i.status AS claim_status, i.lease_until"
            " FROM ep_proofs p"
            " LEFT JOIN ep_inbound i ON i.local = p.owner_local AND i.message_id = p.owner_message"
            " WHERE p.chain = ? AND p.proof_key = ?" + (" FOR UPDATE OF p" if self.lock_clause else ""),
            (c.proof.chain, c.proof.key),
        )
        if row is None:
            return Begin("busy")  # released between our insert and this read: try again
        if (row["owner_local"], row["owner_message"]) == (c.local, c.message_id):
            return None
        if row["status"] != "held":
            return Begin("proof_replayed")
        lease = row["lease_until"]
        if row["claim_status"] == "claimed" and lease is not None and self.ut(lease) > c.now:
            return Begin("busy")
        x.exec(
            "UPDATE ep_proofs SET owner_local = ?, owner_message = ? WHERE chain = ? AND proof_key = ?"
            " AND status = 'held'",
            (c.local, c.message_id, c.proof.chain, c.proof.key),
        )
        return None

    def _reserve_id(self, x: Executor, c: Claim) -> Begin | None:
        got = x.one(
            "INSERT INTO ep_replay (local, sender, protocol_id, content_hash, owner, status, created_at)"
            " VALUES (?, ?, ?, ?, ?, 'held', ?) ON CONFLICT DO NOTHING RETURNING owner",
            (c.local, c.sender, c.protocol_id, c.content_hash, c.message_id, self.t(c.now)),
        )
        if got is not None:
            return None
        row = x.one(
            "SELECT owner, content_hash, digest, status, outcome FROM ep_replay"
            " WHERE local = ? AND sender = ? AND protocol_id = ?" + self.lock_clause,
            (c.local, c.sender, c.protocol_id),
        )
        assert row is not None
        owner, status, outcome = row["owner"], row["status"], row["outcome"]
        stored_hash, stored_digest = row["content_hash"], row["digest"]
        if owner == c.message_id:
            return None
        if not same_content(stored_hash, stored_digest, c.content_hash):
            return Begin("duplicate_id")
        if status != "done":
            return Begin("busy")  # the original is still being handled
        if outcome is None:  # a compacted pair: its original claim keeps the outcome
            got = x.one("SELECT outcome FROM ep_inbound WHERE local = ? AND message_id = ?", (c.local, owner))
            outcome = got["outcome"] if got is not None else None
        recorded = self.uj(outcome) if outcome is not None else small(None)
        requeued = tuple(recorded.get("outbox", ()))
        if requeued:
            # The recorded reply goes out again: the same rows, so the same bytes.
            x.many(
                "UPDATE ep_outbox SET status = 'pending', next_attempt = NULL WHERE message_id = ?",
                [(m,) for m in requeued],
            )
        mine = dict(recorded)
        mine["message_id"] = c.message_id
        mine["retransmission_of"] = recorded.get("message_id")
        x.exec(
            "UPDATE ep_inbound SET status = 'done', outcome = ?, done_at = ? WHERE local = ?"
            " AND message_id = ?",
            (self.j(mine), self.t(c.now), c.local, c.message_id),
        )
        return Begin("retransmission", outcome=recorded, requeued=requeued)

    def _ref_flows(self, x: Executor, c: Claim) -> tuple[tuple[FlowRecord, ...], tuple[str, ...]]:
        if not c.refs or c.sender is None:
            return (), ()
        found: dict[str, FlowRecord] = {}
        missing: list[str] = []
        peer = c.sender
        for ref in c.refs:
            row = x.one(
                f"SELECT {_FLOW_COLS} FROM ep_flow_refs r JOIN ep_flows f ON f.flow_id = r.flow_id"
                " WHERE r.local = ? AND r.peer = ? AND r.author = ? AND r.protocol_id = ?",
                (c.local, peer, c.local, ref),
            )
            if row is None:
                missing.append(ref)
            else:
                rec = self._flow(row)
                found.setdefault(rec.flow_id, rec)
        return tuple(found.values()), tuple(missing)

    def _thread_flows(self, x: Executor, c: Claim) -> tuple[tuple[str, FlowRecord], ...]:
        out: list[tuple[str, FlowRecord]] = []
        for mid in c.thread[:20]:
            row = x.one(
                f"SELECT {_FLOW_COLS} FROM ep_flow_msgids m JOIN ep_flows f ON f.flow_id = m.flow_id"
                " WHERE m.local = ? AND m.message_id = ?",
                (c.local, mid),
            )
            if row is not None:
                out.append((mid, self._flow(row)))
        return tuple(out)

    def commit_step(self, commit: Commit) -> CommitResult:
        try:
            with self.write() as x:
                self._commit(x, commit)
        except Abort as abort:
            return abort.result
        return "ok"

    def _commit(self, x: Executor, c: Commit) -> None:
        """One step's writes, in this order, in the caller's transaction; a write that
        finds the world moved on raises Abort and the transaction writes nothing."""
        now = self.t(c.now)
        if c.job_move is not None and not self._job_move(x, c.job_move):
            raise Abort("lost")  # the job moved on (another worker answered it): write nothing
        flow_id = c.flow.record.flow_id if c.flow is not None else c.outcome.get("flow_id")
        if c.message_id is not None:
            n = x.exec(
                "UPDATE ep_inbound SET status = 'done', outcome = ?, done_at = ?, flow_id = ?"
                " WHERE local = ? AND message_id = ? AND status = 'claimed'",
                (self.j(dict(c.outcome)), now, flow_id, c.local, c.message_id),
            )
            if n == 0:
                raise Abort("lost")
        if c.flow is not None:
            self._commit_flow(x, c.flow.record, now)
        self._commit_log(x, c)
        if c.outbox:
            self._commit_outbox(x, c, now)
        if c.job_new is not None:
            self._job_insert(x, c.job_new)  # a redone step finds its job written: kept
        self._commit_fates(x, c, now)

    def _commit_flow(self, x: Executor, r: FlowRecord, now: Any) -> None:
        """The flow made (version 0) or moved from the version read: else a conflict."""
        if r.version == 0:
            got = x.one(
                "INSERT INTO ep_flows (flow_id, local, peer, kind, side, state, version, data, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING version",
                (r.flow_id, r.local, r.peer, r.kind, r.side, r.state, self.j(dict(r.data)), now, now),
            )
            if got is None:
                raise Abort("conflict")
        else:
            n = x.exec(
                "UPDATE ep_flows SET state = ?, data = ?, version = version + 1, updated_at = ?"
                " WHERE flow_id = ? AND version = ?",
                (r.state, self.j(dict(r.data)), now, r.flow_id, r.version),
            )
            if n == 0:
                raise Abort("conflict")

    def _commit_log(self, x: Executor, c: Commit) -> None:
        """The flow's references, Message-IDs and log entries."""
        if c.refs:
            x.many(
                "INSERT INTO ep_flow_refs (local, peer, author, protocol_id, flow_id) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT DO NOTHING",
                [(c.local, peer, author, pid, fid) for peer, author, pid, fid in c.refs],
            )
        if c.message_ids:
            x.many(
                "INSERT INTO ep_flow_msgids (local, message_id, flow_id) VALUES (?, ?, ?) ON"
                " CONFLICT DO NOTHING",
                [(c.local, mid, fid) for mid, fid in c.message_ids],
            )
        if c.log:
            x.many(
                "INSERT INTO ep_log (flow_id, at, direction, type, message_id, protocol_id,"
                " sender, recipient,"
                " body, verdict, oops) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (e.flow_id, self.t(e.at), e.direction, e.type, e.message_id, e.protocol_id, e.sender,
                     e.recipient, self.j(e.body) if e.body is not None else None,
                     self.j(dict(e.verdict)) if e.verdict is not None else None, e.oops)
                    for e in c.log
                ],
            )

    def _commit_outbox(self, x: Executor, c: Commit, now: Any) -> None:
        """The outbox rows, written with the step (the transactional outbox)."""
        # v11's columns are written only when a row needs them (an Auto-Submitted mark,
        # a held answer): a plain row stays v1's, so code writing one still runs beside
        # a ledger not yet upgraded (tests/ledger/test_upgrade_v10.py).
        marked = c.hold is not None or any(ob.auto_submitted for ob, _ in c.outbox)
        rows = []
        for ob, fid in c.outbox:
            d = outbound_to_row(ob)
            row = [
                d["message_id"],
                fid,
                d["sender"],
                d["recipient"],
                d["type"],
                self.j(d["body"]),
                self.t(d["date"]),
                d["in_reply_to"],
                self.j(d["refs"]),
                d["note"],
                "pending" if c.hold is None else "held",
                now,
            ]
            rows.append((*row, d["auto_submitted"], c.hold) if marked else tuple(row))
        extra = (", auto_submitted, last_error", ", ?, ?") if marked else ("", "")
        x.many(
            "INSERT INTO ep_outbox (message_id, flow_id, sender, recipient, type, body,"
            f" date, in_reply_to, refs, note, status, attempts, created_at{extra[0]})"
            f" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?{extra[1]})"
            " ON CONFLICT DO NOTHING",
            rows,
        )

    def _commit_fates(self, x: Executor, c: Commit, now: Any) -> None:
        """What became of the held proof (spent, or released) and of the (sender, id)
        reservation (done, or released)."""
        if c.proof is not None and c.proof_fate is not None:
            owner = (c.proof.chain, c.proof.key, c.local, c.message_id or "")
            if c.proof_fate == "spend":
                # No verdict: the flow log holds it and ages out with it (schema v10).
                x.exec(
                    "UPDATE ep_proofs SET status = 'spent', spent_at = ?"
                    " WHERE chain = ? AND proof_key = ? AND owner_local = ? AND owner_message = ?",
                    (now, *owner),
                )
            else:
                x.exec(
                    "DELETE FROM ep_proofs WHERE chain = ? AND proof_key = ? AND owner_local = ?"
                    " AND owner_message = ? AND status = 'held'",
                    owner,
                )
        if c.sender is not None and c.protocol_id is not None and c.replay_fate is not None:
            key = (c.local, c.sender, c.protocol_id, c.message_id or "")
            if c.replay_fate == "done":
                x.exec(
                    "UPDATE ep_replay SET status = 'done', outcome = ? WHERE local = ? AND sender = ?"
                    " AND protocol_id = ? AND owner = ?",
                    (self.j(dict(c.outcome)), *key),
                )
            else:
                x.exec(
                    "DELETE FROM ep_replay WHERE local = ? AND sender = ? AND protocol_id = ? AND owner = ?",
                    key,
                )

    # -- automatic answers (RFC 3834): the per-peer rate limit and the loop detector
    def answer_take(
        self, local: str, peer: str, thread: str, message_id: str, now: datetime, limits: AnswerLimits
    ) -> AnswerVerdict:
        since = self.t(now - limits.window)
        with self.write() as x:
            self._answer_lock(x, local, peer)
            if x.one("SELECT 1 FROM ep_answers WHERE local = ? AND message_id = ?", (local, message_id)):
                return "ok"  # this message drew its answer before (a redone step)
            x.exec("DELETE FROM ep_answers WHERE local = ? AND peer = ? AND at < ?", (local, peer, since))
            if limits.per_thread > 0:
                row = x.one(
                    "SELECT COUNT(*) AS n FROM ep_answers WHERE local = ? AND thread = ? AND peer = ?"
                    " AND at >= ?",
                    (local, thread, peer, since),  # per peer: no one else can use up a thread
                )
                if row is not None and int(row["n"]) >= limits.per_thread:
                    return "loop_detected"
            if limits.per_peer > 0:
                row = x.one(
                    "SELECT COUNT(*) AS n FROM ep_answers WHERE local = ? AND peer = ? AND at >= ?",
                    (local, peer, since),
                )
                if row is not None and int(row["n"]) >= limits.per_peer:
                    return "rate_limited"
            x.exec(
                "INSERT INTO ep_answers (local, message_id, peer, thread, at) VALUES (?, ?, ?, ?, ?)",
                (local, message_id, peer, thread, self.t(now)),
            )
        return "ok"

    def _answer_lock(self, x: Executor, local: str, peer: str) -> None:
        """Serialize draws for one (local, peer). SQLite's write transaction is already
        exclusive; PostgreSQL takes a transaction-scoped advisory lock."""

    # -- reading
    def get_flow(self, flow_id: str) -> FlowRecord | None:
        with self.read() as x:
            row = x.one(f"SELECT {_FLOW_COLS} FROM ep_flows f WHERE f.flow_id = ?", (flow_id,))
        return self._flow(row) if row else None

    def list_flows(
        self, local: str | None = None, limit: int = 100, before: tuple[datetime, str] | None = None
    ) -> list[FlowRecord]:
        # Newest first, one page: an index walk on (updated_at, flow_id), with or without
        # `local`, that stops after `limit` rows; `before` is the last row of the previous page.
        where, args = [], []
        if local is not None:
            where.append("f.local = ?")
            args.append(local.lower())
        if before is not None:
            where.append("(f.updated_at, f.flow_id) < (?, ?)")
            args += [self.t(before[0]), before[1]]
        sql = f"SELECT {_FLOW_COLS} FROM ep_flows f"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.read() as x:
            rows = x.all(sql + " ORDER BY f.updated_at DESC, f.flow_id DESC LIMIT ?", (*args, limit))
        return [self._flow(r) for r in rows]

    def flow_log(self, flow_id: str) -> list[LogEntry]:
        with self.read() as x:
            rows = x.all(
                "SELECT seq, flow_id, at, direction, type, message_id, protocol_id, sender, recipient, body,"
                " verdict, oops FROM ep_log WHERE flow_id = ? ORDER BY seq",
                (flow_id,),
            )
        return [
            LogEntry(
                flow_id=r["flow_id"],
                at=self.ut(r["at"]),
                direction=r["direction"],
                type=r["type"],
                message_id=r["message_id"],
                protocol_id=r["protocol_id"],
                sender=r["sender"],
                recipient=r["recipient"],
                body=self.uj_opt(r["body"]),
                verdict=self.uj_opt(r["verdict"]),
                oops=r["oops"],
                seq=int(r["seq"]),
            )
            for r in rows
        ]

    def flow_for_message(self, local: str, message_id: str) -> FlowRecord | None:
        with self.read() as x:
            row = x.one(
                f"SELECT {_FLOW_COLS} FROM ep_flow_msgids m JOIN ep_flows f ON f.flow_id = m.flow_id"
                " WHERE m.local = ? AND m.message_id = ?",
                (local.lower(), message_id),
            )
        return self._flow(row) if row else None

    def flow_for_ref(self, local: str, peer: str, author: str, protocol_id: str) -> FlowRecord | None:
        with self.read() as x:
            row = x.one(
                f"SELECT {_FLOW_COLS} FROM ep_flow_refs r JOIN ep_flows f ON f.flow_id = r.flow_id"
                " WHERE r.local = ? AND r.peer = ? AND r.author = ? AND r.protocol_id = ?",
                (local.lower(), peer.lower(), author.lower(), protocol_id),
            )
        return self._flow(row) if row else None

    def inbound_outcome(self, local: str, message_id: str) -> Mapping[str, Any] | None:
        with self.read() as x:
            row = x.one(
                "SELECT outcome FROM ep_inbound WHERE local = ? AND message_id = ? AND status = 'done'",
                (local.lower(), message_id),
            )
        return self.uj(row["outcome"]) if row else None

    def proof_status(self, proof: ProofKey) -> str | None:
        with self.read() as x:
            row = x.one(
                "SELECT status FROM ep_proofs WHERE chain = ? AND proof_key = ?", (proof.chain, proof.key)
            )
        return str(row["status"]) if row else None

    # -- outbox


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
