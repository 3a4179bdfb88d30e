"""Refunds in the ledger: money a worker pays back, at most once, on both backends.

One row per refund, keyed by what it refunds (`job:<id>`, `pay:<chain>:<proof key>`), so
a second ask for the same money finds the first. The row is written *before* anything
is signed and moves forward only:

    paying  → signed (the transaction's id and bytes, recorded before they are broadcast)
            → paid   (the proof)
    paying | signed → failed (nothing moved: the rail refused, or the chain says the
                              signed transaction failed or can never land)

A row is worked by one owner at a time (a lease, as the inbound claims have): another
process finds it busy until the lease runs out, and then takes it over to recover it
(envelopay.worker.refunds). The table belongs to its own component of the one migrator
("refunds"), so its versions never collide with the ledger's or the jobs'.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from envelopay.errors import ConfigError
from envelopay.ledger._sql_base import Executor, Row, SqlBase
from envelopay.ledger.schema import JSON_TYPE, TIME_TYPE
from envelopay.persist import Dialect, Migrations, Step, migrate

__all__ = ["REFUND_MIGRATIONS", "Claimed", "Refund", "RefundBook", "RefundOrder", "RefundStatus"]

RefundStatus = Literal["paying", "signed", "paid", "failed"]
# new: first claim; retake: a row left unsettled (failed, or a dead owner's) taken over;
# paid: settled before; busy: another owner works it now.
Claimed = Literal["new", "retake", "paid", "busy"]

_T, _J = TIME_TYPE, JSON_TYPE


def _v1(d: Dialect) -> list[str]:
    return [
        "CREATE TABLE IF NOT EXISTS ep_refunds ("
        " refund_key TEXT PRIMARY KEY, local TEXT NOT NULL, peer TEXT NOT NULL, flow_id TEXT,"
        " chain TEXT NOT NULL, token TEXT NOT NULL, amount TEXT NOT NULL, recipient TEXT NOT NULL,"
        " reason TEXT NOT NULL, status TEXT NOT NULL, owner TEXT, lease_until " + _T[d] + ","
        " tx_id TEXT, signed TEXT, proof " + _J[d] + ", error TEXT, attempts INTEGER NOT NULL,"
        " created_at " + _T[d] + " NOT NULL, updated_at " + _T[d] + " NOT NULL)",
        "CREATE INDEX IF NOT EXISTS ep_refunds_open ON ep_refunds (status, lease_until)",
        "CREATE INDEX IF NOT EXISTS ep_refunds_flow ON ep_refunds (flow_id)",
    ]


REFUND_MIGRATIONS = Migrations(
    "refunds", (Step(1, "refunds", {"sqlite": _v1("sqlite"), "postgres": _v1("postgres")}),)
)

_COLS = (
    "refund_key, local, peer, flow_id, chain, token, amount, recipient, reason, status, owner,"
    " lease_until, tx_id, signed, proof, error, attempts, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class RefundOrder:
    """What to pay back: `amount` of `token` on `chain` to the wallet `recipient` (the one
    the verified proof paid from), for `peer`'s flow; `reason` says why (task_failed,
    underpaid, overpaid)."""

    key: str
    local: str
    peer: str
    flow_id: str | None
    chain: str
    token: str
    amount: int
    recipient: str
    reason: str


@dataclass(frozen=True, slots=True)
class Refund:
    order: RefundOrder
    status: RefundStatus
    owner: str | None
    lease_until: datetime | None
    tx_id: str | None
    signed: bytes | None
    proof: dict[str, Any] | None
    error: str | None
    attempts: int
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        o = self.order
        return {
            "key": o.key, "local": o.local, "peer": o.peer, "flow_id": o.flow_id, "chain": o.chain,
            "token": o.token, "amount": str(o.amount), "recipient": o.recipient, "reason": o.reason,
            "status": self.status, "tx_id": self.tx_id, "proof": self.proof, "error": self.error,
            "attempts": self.attempts, "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
        }


class RefundBook:
    """The refunds table on a ledger store (SqliteStore or PostgresStore); its steps are
    applied on open, in one write transaction."""

    def __init__(self, store: object, *, now: datetime) -> None:
        if not isinstance(store, SqlBase):  # a Store of another kind keeps no refunds table
            raise ConfigError(f"refunds need the SQLite or PostgreSQL ledger, not {type(store).__name__}")
        self.store = store
        self.dialect = store.dialect
        with store.write() as x:
            migrate(x, self.dialect, REFUND_MIGRATIONS, str(store.t(now)))

    def _row(self, r: Row) -> Refund:
        s = self.store
        order = RefundOrder(
            key=r["refund_key"], local=r["local"], peer=r["peer"], flow_id=r["flow_id"], chain=r["chain"],
            token=r["token"], amount=int(r["amount"]), recipient=r["recipient"], reason=r["reason"],
        )
        return Refund(
            order=order, status=r["status"], owner=r["owner"], lease_until=s.ut_opt(r["lease_until"]),
            tx_id=r["tx_id"], signed=bytes.fromhex(r["signed"]) if r["signed"] else None,
            proof=s.uj_opt(r["proof"]), error=r["error"], attempts=int(r["attempts"]),
            created_at=s.ut(r["created_at"]), updated_at=s.ut(r["updated_at"]),
        )

    def _one(self, x: Executor, key: str) -> Refund | None:
        row = x.one(f"SELECT {_COLS} FROM ep_refunds WHERE refund_key = ?", (key,))
        return None if row is None else self._row(row)

    def claim(
        self, order: RefundOrder, *, owner: str, now: datetime, lease_until: datetime
    ) -> tuple[Claimed, Refund]:
        """Take the refund `order.key` to work on: one winner among processes. A row that
        exists keeps its own terms (the first ask's amount and wallet)."""
        s, o = self.store, order
        with s.write() as x:
            got = x.one(
                f"INSERT INTO ep_refunds ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'paying', ?, ?,"
                " NULL, NULL, NULL, NULL, 1, ?, ?) ON CONFLICT DO NOTHING RETURNING " + _COLS,
                (o.key, o.local, o.peer, o.flow_id, o.chain, o.token, str(o.amount), o.recipient, o.reason,
                 owner, s.t(lease_until), s.t(now), s.t(now)),
            )
            if got is not None:
                return "new", self._row(got)
            # Unsettled and nobody alive on it (released, or its owner's lease ran out: a process
            # that died), or failed with nothing moved: ours to recover or redo. Owners are one
            # per process, so two live processes never work one refund at once.
            got = x.one(
                "UPDATE ep_refunds SET owner = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?,"
                " status = CASE WHEN status = 'failed' THEN 'paying' ELSE status END"
                " WHERE refund_key = ? AND (status = 'failed' OR (status IN ('paying', 'signed')"
                " AND (lease_until IS NULL OR lease_until < ?))) RETURNING " + _COLS,
                (owner, s.t(lease_until), s.t(now), o.key, s.t(now)),
            )
            if got is not None:
                return "retake", self._row(got)
            row = self._one(x, o.key)
        assert row is not None
        return ("paid" if row.status == "paid" else "busy"), row

    def signed(self, key: str, owner: str, tx_id: str, blob: bytes, now: datetime) -> bool:
        """Record the signed transaction before it is broadcast (after a crash the chain is
        asked about this id, and these same bytes may go out again: never a second one)."""
        with self.store.write() as x:
            return x.exec(
                "UPDATE ep_refunds SET status = 'signed', tx_id = ?, signed = ?, updated_at = ?"
                " WHERE refund_key = ? AND owner = ? AND status = 'paying'",
                (tx_id, blob.hex(), self.store.t(now), key, owner),
            ) == 1

    def paid(self, key: str, owner: str, proof: dict[str, Any], tx_id: str | None, now: datetime) -> bool:
        s = self.store
        with s.write() as x:
            return x.exec(
                "UPDATE ep_refunds SET status = 'paid', proof = ?, tx_id = COALESCE(?, tx_id), error = NULL,"
                " lease_until = NULL, updated_at = ? WHERE refund_key = ? AND owner = ?"
                " AND status IN ('paying', 'signed')",
                (s.j(proof), tx_id, s.t(now), key, owner),
            ) == 1

    def failed(self, key: str, owner: str, error: str, now: datetime) -> bool:
        """Nothing moved (the rail refused; the signed transaction failed or expired): the
        refund may be asked again, and will sign anew."""
        with self.store.write() as x:
            return x.exec(
                "UPDATE ep_refunds SET status = 'failed', tx_id = NULL, signed = NULL, error = ?,"
                " lease_until = NULL, updated_at = ? WHERE refund_key = ? AND owner = ?"
                " AND status IN ('paying', 'signed')",
                (error[:500], self.store.t(now), key, owner),
            ) == 1

    def release(self, key: str, owner: str, error: str, now: datetime) -> None:
        """Leave an unsettled row for a later recovery (its outcome is not known yet)."""
        with self.store.write() as x:
            x.exec(
                "UPDATE ep_refunds SET lease_until = NULL, owner = NULL, error = ?, updated_at = ?"
                " WHERE refund_key = ? AND owner = ? AND status IN ('paying', 'signed')",
                (error[:500], self.store.t(now), key, owner),
            )

    def get(self, key: str) -> Refund | None:
        with self.store.read() as x:
            return self._one(x, key)

    def for_flow(self, flow_id: str) -> list[Refund]:
        with self.store.read() as x:
            rows: Sequence[Row] = x.all(
                f"SELECT {_COLS} FROM ep_refunds WHERE flow_id = ? ORDER BY created_at", (flow_id,)
            )
        return [self._row(r) for r in rows]

    def recent(self, local: str, limit: int = 100) -> list[Refund]:
        """Every refund of `local`, newest first (the operator's `envelopay refunds list --all`)."""
        with self.store.read() as x:
            rows: Sequence[Row] = x.all(
                f"SELECT {_COLS} FROM ep_refunds WHERE local = ?"
                " ORDER BY created_at DESC, refund_key LIMIT ?",
                (local, limit),
            )
        return [self._row(r) for r in rows]

    def unsettled(self, local: str, limit: int = 100) -> list[Refund]:
        """Refunds not paid: in doubt (paying, signed) or failed; oldest first."""
        with self.store.read() as x:
            rows: Sequence[Row] = x.all(
                f"SELECT {_COLS} FROM ep_refunds WHERE local = ? AND status <> 'paid'"
                " ORDER BY created_at LIMIT ?",
                (local, limit),
            )
        return [self._row(r) for r in rows]
