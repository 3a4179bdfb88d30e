"""Versioned schema migrations for both backends. A migration is applied once, in
order, inside a transaction, and recorded in `ep_migrations`; `migrate()` upgrades an
existing database to the newest version. Add migrations at the end; never edit one
that has shipped."""

from __future__ import annotations

from typing import Literal

Dialect = Literal["sqlite", "postgres"]

_TIME = {"sqlite": "TEXT", "postgres": "TIMESTAMPTZ"}
_JSON = {"sqlite": "TEXT", "postgres": "JSONB"}
_SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGSERIAL PRIMARY KEY"}

_V1 = """
CREATE TABLE ep_inbound (
    local TEXT NOT NULL, message_id TEXT NOT NULL, content_hash TEXT NOT NULL,
    status TEXT NOT NULL, worker TEXT, lease_until {T}, outcome {J}, flow_id TEXT,
    created_at {T} NOT NULL, done_at {T},
    PRIMARY KEY (local, message_id));
CREATE TABLE ep_replay (
    local TEXT NOT NULL, sender TEXT NOT NULL, protocol_id TEXT NOT NULL, content_hash TEXT NOT NULL,
    owner TEXT NOT NULL, status TEXT NOT NULL, outcome {J}, created_at {T} NOT NULL,
    PRIMARY KEY (local, sender, protocol_id));
CREATE TABLE ep_proofs (
    chain TEXT NOT NULL, proof_key TEXT NOT NULL, owner_local TEXT NOT NULL, owner_message TEXT NOT NULL,
    status TEXT NOT NULL, verdict {J}, created_at {T} NOT NULL, spent_at {T},
    PRIMARY KEY (chain, proof_key));
CREATE TABLE ep_flows (
    flow_id TEXT PRIMARY KEY, local TEXT NOT NULL, peer TEXT NOT NULL, kind TEXT NOT NULL,
    side TEXT NOT NULL, state TEXT NOT NULL, version INTEGER NOT NULL, data {J} NOT NULL,
    created_at {T} NOT NULL, updated_at {T} NOT NULL);
CREATE INDEX ep_flows_local ON ep_flows (local, updated_at);
CREATE TABLE ep_flow_refs (
    local TEXT NOT NULL, peer TEXT NOT NULL, author TEXT NOT NULL, protocol_id TEXT NOT NULL,
    flow_id TEXT NOT NULL, PRIMARY KEY (local, peer, author, protocol_id));
CREATE TABLE ep_flow_msgids (
    local TEXT NOT NULL, message_id TEXT NOT NULL, flow_id TEXT NOT NULL,
    PRIMARY KEY (local, message_id));
CREATE TABLE ep_log (
    seq {S}, flow_id TEXT NOT NULL, at {T} NOT NULL, direction TEXT NOT NULL, type TEXT NOT NULL,
    message_id TEXT, protocol_id TEXT, sender TEXT, recipient TEXT, body {J}, verdict {J}, oops TEXT);
CREATE INDEX ep_log_flow ON ep_log (flow_id, seq);
CREATE TABLE ep_outbox (
    seq {S}, message_id TEXT NOT NULL UNIQUE, flow_id TEXT, sender TEXT NOT NULL, recipient TEXT NOT NULL,
    type TEXT NOT NULL, body {J} NOT NULL, date {T} NOT NULL, in_reply_to TEXT, refs {J} NOT NULL,
    note TEXT, status TEXT NOT NULL, attempts INTEGER NOT NULL, created_at {T} NOT NULL,
    next_attempt {T}, sent_at {T}, last_error TEXT);
"""

# v2: outstanding calls of the email-as-tool client, and a drain index on the outbox.
_V2 = """
CREATE TABLE ep_calls (
    call_id TEXT PRIMARY KEY, local TEXT NOT NULL, peer TEXT NOT NULL, message_id TEXT NOT NULL,
    deadline {T} NOT NULL, status TEXT NOT NULL, request {J} NOT NULL, result {J},
    created_at {T}, resolved_at {T});
CREATE UNIQUE INDEX ep_calls_message ON ep_calls (local, message_id);
CREATE INDEX ep_calls_pending ON ep_calls (status, deadline);
CREATE INDEX ep_outbox_pending ON ep_outbox (status, seq);
"""

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "inbound, replay, proofs, flows, log, outbox", _V1),
    (2, "calls; outbox drain index", _V2),
)
LATEST = MIGRATIONS[-1][0]

MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ep_migrations"
    " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


def statements(sql: str, dialect: Dialect) -> list[str]:
    text = sql.replace("{T}", _TIME[dialect]).replace("{J}", _JSON[dialect]).replace("{S}", _SERIAL[dialect])
    return [s.strip() for s in text.split(";") if s.strip()]
