"""The job queries over a SqlStore's executor and codecs (envelopay.ledger.jobs).

A claim is one write transaction: the due rows are selected (PostgreSQL: `FOR UPDATE
SKIP LOCKED`, so workers sharing a ledger never wait on each other's rows; SQLite: the
write transaction is already exclusive, BEGIN IMMEDIATE) and each is moved to `running`
under the claimer's lease. A row whose lease ran out (its worker died) is due again and
is handed out marked `taken_over`, for the runner to decide: run it again (an
idempotent task) or fail it (the task's failure policy settles it).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from envelopay.ledger._sql_base import Executor, Row, SqlBase
from envelopay.ledger.jobs import JOB_COLUMNS, JOB_STATES, Job, JobMove, JobRound

__all__ = ["JobsMixin"]

_JSON_FIELDS = frozenset({"refund", "rounds"})
_TIME_FIELDS = frozenset({"lease_until", *(f"{s}_at" for s in JOB_STATES)})


class JobsMixin(SqlBase):
    skip_locked: str  # the backend's row-claim clause (SqlStore)

    def _job(self, row: Row) -> Job:
        at = {s: self.ut(row[f"{s}_at"]) for s in JOB_STATES if row[f"{s}_at"] is not None}
        return Job(
            job_id=row["job_id"], local=row["local"], peer=row["peer"], flow_id=row["flow_id"],
            task=row["task"], params=self.uj(row["params"]), order_id=row["order_id"], ref=row["ref"],
            message_id=row["message_id"], chain=row["chain"], token=row["token"],
            amount=int(row["amount"]), payer=row["payer"], proof=self.uj_opt(row["proof"]),
            proof_key=row["proof_key"], policy=row["policy"],
            idempotent=bool(row["idempotent"]), state=row["state"], attempts=int(row["attempts"]),
            created_at=self.ut(row["created_at"]), updated_at=self.ut(row["updated_at"]),
            lease_owner=row["lease_owner"], lease_until=self.ut_opt(row["lease_until"]),
            error=row["error"], result_hash=row["result_hash"], answer_id=row["answer_id"],
            refund=self.uj_opt(row["refund"]), at=at,
            rounds=tuple(JobRound.from_doc(r) for r in self.uj_opt(row["rounds"]) or ()),
        )

    # -- written inside a step's commit (SqlStore._commit) or alone
    def _job_insert(self, x: Executor, job: Job) -> bool:
        now = self.t(job.created_at)
        got = x.one(
            "INSERT INTO ep_jobs (job_id, local, peer, flow_id, task, params, order_id, ref, message_id,"
            " chain, token, amount, payer, proof, proof_key, policy, idempotent, state, attempts,"
            " created_at, updated_at, queued_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', 0, ?, ?, ?)"
            " ON CONFLICT DO NOTHING RETURNING job_id",
            (job.job_id, job.local, job.peer, job.flow_id, job.task, self.j(dict(job.params)),
             job.order_id, job.ref,
             job.message_id, job.chain, job.token, str(job.amount), job.payer,
             None if job.proof is None else self.j(dict(job.proof)), job.proof_key, job.policy,
             1 if job.idempotent else 0, now, now, now),
        )
        return got is not None

    def _job_move(self, x: Executor, m: JobMove) -> bool:
        sets = [f"state = ?, updated_at = ?, {m.to}_at = ?"]
        args: list[Any] = [m.to, self.t(m.now), self.t(m.now)]
        for name, value in sorted(m.fields.items()):
            sets.append(f"{name} = ?")
            if name in _JSON_FIELDS:
                value = None if value is None else self.j(value)
            elif name in _TIME_FIELDS:
                value = self.t(value)
            args.append(value)
        where = f"job_id = ? AND state IN ({', '.join('?' for _ in m.from_states)})"
        args += [m.job_id, *m.from_states]
        if m.owner is not None:
            where += " AND lease_owner = ?"
            args.append(m.owner)
        return x.exec(f"UPDATE ep_jobs SET {', '.join(sets)} WHERE {where}", args) > 0

    # -- the Store's job methods
    def job_add(self, job: Job) -> bool:
        """Write a job outside a step (a reconciled flow); False when the flow has one."""
        with self.write() as x:
            return self._job_insert(x, job)

    def job_move(self, move: JobMove) -> bool:
        with self.write() as x:
            return self._job_move(x, move)

    def job_get(self, job_id: str) -> Job | None:
        with self.read() as x:
            row = x.one(f"SELECT {JOB_COLUMNS} FROM ep_jobs WHERE job_id = ?", (job_id,))
        return self._job(row) if row is not None else None

    def job_for_flow(self, flow_id: str) -> Job | None:
        with self.read() as x:
            row = x.one(f"SELECT {JOB_COLUMNS} FROM ep_jobs WHERE flow_id = ?", (flow_id,))
        return self._job(row) if row is not None else None

    def job_list(
        self, local: str | None = None, states: Sequence[str] | None = None, limit: int = 100,
        *, unanswered: bool = False,
    ) -> list[Job]:
        where, args = ["answer_id IS NULL"] if unanswered else [], []
        if local is not None:
            where.append("local = ?")
            args.append(local.lower())
        if states:
            where.append(f"state IN ({', '.join('?' for _ in states)})")
            args += list(states)
        sql = f"SELECT {JOB_COLUMNS} FROM ep_jobs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.read() as x:
            rows = x.all(sql + " ORDER BY created_at DESC, job_id DESC LIMIT ?", (*args, limit))
        return [self._job(r) for r in rows]

    def job_claim(
        self, owner: str, local: str, task: str, now: datetime, lease_until: datetime, limit: int
    ) -> list[tuple[Job, bool]]:
        """Up to `limit` due jobs of `task`, now `running` under `owner`'s lease, oldest first;
        each with whether it was taken over from a lease that ran out."""
        if limit <= 0:
            return []
        out: list[tuple[Job, bool]] = []
        with self.write() as x:
            rows = x.all(
                "SELECT job_id, state FROM ep_jobs WHERE local = ? AND task = ?"
                " AND (state = 'queued' OR (state = 'running' AND lease_until < ?))"
                f" ORDER BY created_at, job_id LIMIT ?{self.skip_locked}",
                (local, task, self.t(now), limit),
            )
            for r in rows:
                x.exec(
                    "UPDATE ep_jobs SET state = 'running', lease_owner = ?, lease_until = ?,"
                    " attempts = attempts + 1, running_at = ?, updated_at = ? WHERE job_id = ?",
                    (owner, self.t(lease_until), self.t(now), self.t(now), r["job_id"]),
                )
                got = x.one(f"SELECT {JOB_COLUMNS} FROM ep_jobs WHERE job_id = ?", (r["job_id"],))
                assert got is not None
                out.append((self._job(got), r["state"] == "running"))
        return out

    def job_renew(self, job_id: str, owner: str, lease_until: datetime) -> bool:
        with self.write() as x:
            n = x.exec(
                "UPDATE ep_jobs SET lease_until = ?"
                " WHERE job_id = ? AND state = 'running' AND lease_owner = ?",
                (self.t(lease_until), job_id, owner),
            )
        return n > 0
