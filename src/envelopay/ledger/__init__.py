"""envelopay.ledger: durable state — flows, inbound claims, replay keys, spent proofs,
the transactional outbox, per-flow message logs and outstanding calls.

`Store` (ledger.store) is the protocol; `ledger.sqlite.SqliteStore` is the embedded
default and `ledger.postgres.PostgresStore` the scale-out backend (imported from their
modules so that psycopg loads only when used). `envelopay.testing.store.check_store`
runs the contract against any backend.
"""

from envelopay.ledger.store import (
    Begin,
    CallRecord,
    Claim,
    Commit,
    FlowRecord,
    FlowWrite,
    LogEntry,
    OutboxRow,
    ProofKey,
    Store,
)

__all__ = [
    "Begin",
    "CallRecord",
    "Claim",
    "Commit",
    "FlowRecord",
    "FlowWrite",
    "LogEntry",
    "OutboxRow",
    "ProofKey",
    "Store",
]
