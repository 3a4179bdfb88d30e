"""Versioned schema migrations for both backends. A migration is applied once, in
order, inside a transaction, and recorded in `ep_migrations`; `migrate()` upgrades an
existing database to the newest version. Add migrations at the end; never edit one
that has shipped."""

from __future__ import annotations

from typing import Literal

Dialect = Literal["sqlite", "postgres"]

# Column types by dialect, for every ledger table (its components' steps too).
TIME_TYPE = {"sqlite": "TEXT", "postgres": "TIMESTAMPTZ"}
JSON_TYPE = {"sqlite": "TEXT", "postgres": "JSONB"}
_SERIAL = {"sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT", "postgres": "BIGSERIAL PRIMARY KEY"}
_BLOB = {"sqlite": "BLOB", "postgres": "BYTEA"}

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

# v9: waiting messages (ledger/waiting.py): messages whose payment is not final yet.
_V9 = """
CREATE TABLE ep_deferrals (
    local TEXT NOT NULL, message_id TEXT NOT NULL, raw TEXT NOT NULL, first_seen {T} NOT NULL,
    next_at {T} NOT NULL, deadline {T} NOT NULL, attempts INTEGER NOT NULL, last_status TEXT,
    last_detail TEXT, PRIMARY KEY (local, message_id));
CREATE INDEX ep_deferrals_due ON ep_deferrals (local, next_at);
"""

# v5: a bounce (DSN) comes back for a sent row: status 'bounced' and the DSN's status
# code; and transport events (an AgentMail webhook's event id) handled once, persisted.
# Existing ledgers gain the column (NULL on old rows) and the table; nothing is rewritten.
_V5 = """
ALTER TABLE ep_outbox ADD COLUMN bounce_status TEXT;
CREATE TABLE ep_events (
    source TEXT NOT NULL, event_id TEXT NOT NULL, done_at {T} NOT NULL, data {J},
    PRIMARY KEY (source, event_id));
"""

# v7: outbox rows are claimed by one drainer at a time (owner and lease), so two
# workers on one ledger never deliver the same row twice without a crash.
_V7 = """
ALTER TABLE ep_outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE ep_outbox ADD COLUMN claim_until {T};
"""

# v8 (issue 17): plans that cannot flip. The drain reads a partial index holding only
# pending rows, in seq order: whatever ANALYZE saw (a 3% backlog made PostgreSQL walk the
# primary key and filter, 268 ms a drain at 1M rows), no other plan is cheaper, and the
# index stays as small as the backlog. Flow listings page on (updated_at, flow_id), with
# or without a local address. Retention (ledger/retention.py) walks the `done` indexes
# (a compacted claim drops out of ep_inbound_done: its lease is cleared), keeps its flow
# cursor in ep_retention, and leaves a row per flow in ep_flow_summary.
_V8_PLANS = """
CREATE INDEX ep_outbox_due ON ep_outbox (seq) WHERE status = 'pending';
DROP INDEX ep_outbox_pending;
CREATE INDEX ep_outbox_done ON ep_outbox (created_at, seq) WHERE status <> 'pending';
CREATE INDEX ep_flows_recent ON ep_flows (updated_at, flow_id);
CREATE INDEX ep_flows_local_recent ON ep_flows (local, updated_at, flow_id);
DROP INDEX ep_flows_local;
CREATE INDEX ep_inbound_done ON ep_inbound (done_at) WHERE status = 'done' AND lease_until IS NOT NULL;
CREATE INDEX ep_flow_refs_flow ON ep_flow_refs (flow_id);
CREATE INDEX ep_flow_msgids_flow ON ep_flow_msgids (flow_id);
CREATE INDEX ep_calls_resolved ON ep_calls (resolved_at, call_id) WHERE status <> 'pending';
CREATE TABLE ep_flow_summary (flow_id TEXT PRIMARY KEY, messages INTEGER NOT NULL, compacted_at {T} NOT NULL);
CREATE TABLE ep_retention (name TEXT PRIMARY KEY, mark TEXT NOT NULL, at {T} NOT NULL)
"""

# v10 (issue 17): what stays forever, in its smallest form. Every statement is instant or
# touches only compacted rows, so a live ledger upgrades beside its workers: new columns
# are nullable (no rewrite on either backend), the per-flow summary moves into the flow
# row (`compacted`: log entries deleted; only flows compacted before, all idle), and two
# partial indexes hold only rows compaction has still to shrink: spent proofs that still
# carry a verdict (v10 no longer writes it: the flow log holds the same verdict, and ages
# out with it) and transport events by age. A compacted (sender, id) pair keeps its
# content hash in 16 bytes (`digest`, ep_digest(): compacted.py) and no outcome
# (a retransmission reads its original claim's outcome instead).
_V10 = """
ALTER TABLE ep_replay ADD COLUMN digest {B};
ALTER TABLE ep_flows ADD COLUMN compacted INTEGER;
UPDATE ep_flows SET compacted = s.messages FROM ep_flow_summary s WHERE s.flow_id = ep_flows.flow_id;
DROP TABLE ep_flow_summary;
CREATE INDEX ep_proofs_trim ON ep_proofs (spent_at) WHERE status = 'spent' AND verdict IS NOT NULL;
CREATE INDEX ep_events_done ON ep_events (done_at)
"""

# v11 (issue 29): automatic answers (RFC 3834). An outbox row says whether its mail is an
# automatic answer (`auto_submitted`, the Auto-Submitted keyword it carries); one not sent
# because of a signal or a limit is written `held`. ep_answers counts the automatic
# answers drawn per peer and per thread, one row per inbound message answered, so the
# rate limit and the loop detector hold across processes and restarts; rows older than
# the window are deleted by the draw itself (per peer, through its index).
_V11 = """
ALTER TABLE ep_outbox ADD COLUMN auto_submitted TEXT;
CREATE TABLE ep_answers (
    local TEXT NOT NULL, message_id TEXT NOT NULL, peer TEXT NOT NULL, thread TEXT NOT NULL,
    at {T} NOT NULL, PRIMARY KEY (local, message_id));
CREATE INDEX ep_answers_peer ON ep_answers (local, peer, at);
CREATE INDEX ep_answers_thread ON ep_answers (local, thread, at)
"""

# v12: the answers held (not sent: RFC 3834, a limit) are listed from their own small
# partial index, newest first (`envelopay outbox`), whatever the outbox's size.
_V12 = """
CREATE INDEX ep_outbox_held ON ep_outbox (seq) WHERE status = 'held'
"""

MIGRATIONS: tuple[tuple[int, str, str], ...] = (
    (1, "inbound, replay, proofs, flows, log, outbox", _V1),
    (2, "calls; outbox drain index", _V2),
    (5, "outbox bounces; transport events", _V5),
    (7, "outbox claims (owner, lease)", _V7),
    (8, "partial drain index; paging and retention indexes", _V8_PLANS),
    (9, "deferred proofs", _V9),
    (10, "smallest retained form: digests, summary in the flow row", _V10),
    (11, "automatic answers: outbox auto_submitted and held rows; answer counts", _V11),
    (12, "held outbox rows index", _V12),
)

MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ep_migrations"
    " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
)


def statements(sql: str, dialect: Dialect) -> list[str]:
    text = sql.replace("{T}", TIME_TYPE[dialect]).replace("{J}", JSON_TYPE[dialect])
    text = text.replace("{S}", _SERIAL[dialect]).replace("{B}", _BLOB[dialect])
    return [s.strip() for s in text.split(";") if s.strip()]


# v3 (PostgreSQL only): each step's two transactions as one server-side call each, so a
# step costs two round trips instead of about seventeen. Same semantics as the Python
# path in _sql.py (which SQLite runs in-process); check_store holds both to it.
_PG_BEGIN = r"""
CREATE OR REPLACE FUNCTION ep_begin_step(
    p_local text, p_mid text, p_hash text, p_worker text, p_now timestamptz, p_lease timestamptz,
    p_sender text, p_pid text, p_chain text, p_key text, p_refs text[], p_thread text[]
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    r record;
    f record;
    x text;
    ref_flows jsonb := '[]'::jsonb;
    missing jsonb := '[]'::jsonb;
    thread jsonb := '[]'::jsonb;
    queued jsonb;
BEGIN
    INSERT INTO ep_inbound (local, message_id, content_hash, status, worker, lease_until, created_at)
        VALUES (p_local, p_mid, p_hash, 'claimed', p_worker, p_lease, p_now) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        SELECT status, worker, lease_until, outcome INTO r FROM ep_inbound
            WHERE local = p_local AND message_id = p_mid FOR UPDATE;
        IF r.status = 'done' THEN
            RETURN jsonb_build_object('status', 'seen', 'outcome', r.outcome);
        END IF;
        IF r.worker IS DISTINCT FROM p_worker AND r.lease_until > p_now THEN
            RETURN jsonb_build_object('status', 'busy');
        END IF;
        UPDATE ep_inbound SET worker = p_worker, lease_until = p_lease
            WHERE local = p_local AND message_id = p_mid;
    END IF;
    IF p_sender IS NOT NULL AND p_pid IS NOT NULL THEN
        INSERT INTO ep_replay (local, sender, protocol_id, content_hash, owner, status, created_at)
            VALUES (p_local, p_sender, p_pid, p_hash, p_mid, 'held', p_now) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT owner, content_hash, status, outcome INTO r FROM ep_replay
                WHERE local = p_local AND sender = p_sender AND protocol_id = p_pid FOR UPDATE;
            IF r.owner <> p_mid THEN
                IF r.content_hash <> p_hash THEN
                    RETURN jsonb_build_object('status', 'duplicate_id');
                END IF;
                IF r.status <> 'done' THEN
                    RETURN jsonb_build_object('status', 'busy');
                END IF;
                queued := coalesce(r.outcome -> 'outbox', '[]'::jsonb);
                UPDATE ep_outbox SET status = 'pending', next_attempt = NULL
                    WHERE message_id IN (SELECT jsonb_array_elements_text(queued));
                UPDATE ep_inbound SET status = 'done', done_at = p_now,
                    outcome = r.outcome || jsonb_build_object('message_id', p_mid,
                                                              'retransmission_of', r.outcome -> 'message_id')
                    WHERE local = p_local AND message_id = p_mid;
                RETURN jsonb_build_object('status', 'retransmission', 'outcome', r.outcome,
                                          'requeued', queued);
            END IF;
        END IF;
    END IF;
    IF p_chain IS NOT NULL THEN
        INSERT INTO ep_proofs (chain, proof_key, owner_local, owner_message, status, created_at)
            VALUES (p_chain, p_key, p_local, p_mid, 'held', p_now) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            SELECT owner_local, owner_message INTO r FROM ep_proofs
                WHERE chain = p_chain AND proof_key = p_key;
            IF NOT FOUND OR r.owner_local <> p_local OR r.owner_message <> p_mid THEN
                RETURN jsonb_build_object('status', 'proof_replayed');
            END IF;
        END IF;
    END IF;
    IF p_sender IS NOT NULL THEN
        FOREACH x IN ARRAY coalesce(p_refs, '{}'::text[]) LOOP
            SELECT fl.* INTO f FROM ep_flow_refs rf JOIN ep_flows fl ON fl.flow_id = rf.flow_id
                WHERE rf.local = p_local AND rf.peer = p_sender AND rf.author = p_local
                  AND rf.protocol_id = x;
            IF FOUND THEN
                ref_flows := ref_flows || jsonb_build_array(to_jsonb(f));
            ELSE
                missing := missing || to_jsonb(x);
            END IF;
        END LOOP;
    END IF;
    FOREACH x IN ARRAY coalesce(p_thread[1:20], '{}'::text[]) LOOP
        SELECT fl.* INTO f FROM ep_flow_msgids m JOIN ep_flows fl ON fl.flow_id = m.flow_id
            WHERE m.local = p_local AND m.message_id = x;
        IF FOUND THEN
            thread := thread || jsonb_build_array(jsonb_build_array(x, to_jsonb(f)));
        END IF;
    END LOOP;
    RETURN jsonb_build_object('status', 'new', 'ref_flows', ref_flows, 'missing', missing, 'thread', thread);
END $$
"""

_PG_COMMIT = r"""
CREATE OR REPLACE FUNCTION ep_commit_step(c jsonb) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    fl jsonb := c -> 'flow';
    v_now timestamptz := (c ->> 'now')::timestamptz;
    v_local text := c ->> 'local';
    v_mid text := c ->> 'message_id';
BEGIN
    -- No subtransaction: a conflict found before any write returns at once; one found
    -- after a write raises, which rolls the whole call back (the client maps the code).
    IF jsonb_typeof(fl) = 'object' THEN
        IF (fl ->> 'version')::int = 0 THEN
            INSERT INTO ep_flows (flow_id, local, peer, kind, side, state, version, data, created_at,
                                  updated_at)
                VALUES (fl ->> 'flow_id', fl ->> 'local', fl ->> 'peer', fl ->> 'kind', fl ->> 'side',
                        fl ->> 'state', 1, fl -> 'data', v_now, v_now)
                ON CONFLICT DO NOTHING;
        ELSE
            UPDATE ep_flows SET state = fl ->> 'state', data = fl -> 'data', version = version + 1,
                updated_at = v_now
                WHERE flow_id = fl ->> 'flow_id' AND version = (fl ->> 'version')::int;
        END IF;
        IF NOT FOUND THEN
            RETURN 'conflict';
        END IF;
    END IF;
    IF v_mid IS NOT NULL THEN
        UPDATE ep_inbound SET status = 'done', outcome = c -> 'outcome', done_at = v_now,
            flow_id = c ->> 'flow_id'
            WHERE local = v_local AND message_id = v_mid AND status = 'claimed';
        IF NOT FOUND THEN
            IF jsonb_typeof(fl) = 'object' THEN
                RAISE EXCEPTION 'lost' USING ERRCODE = 'EPLST';
            END IF;
            RETURN 'lost';
        END IF;
    END IF;
    INSERT INTO ep_flow_refs (local, peer, author, protocol_id, flow_id)
        SELECT v_local, e ->> 0, e ->> 1, e ->> 2, e ->> 3 FROM jsonb_array_elements(c -> 'refs') e
        ON CONFLICT DO NOTHING;
    INSERT INTO ep_flow_msgids (local, message_id, flow_id)
        SELECT v_local, e ->> 0, e ->> 1 FROM jsonb_array_elements(c -> 'message_ids') e
        ON CONFLICT DO NOTHING;
    INSERT INTO ep_log (flow_id, at, direction, type, message_id, protocol_id, sender, recipient, body,
                        verdict, oops)
        SELECT e ->> 'flow_id', (e ->> 'at')::timestamptz, e ->> 'direction', e ->> 'type',
               e ->> 'message_id',
               e ->> 'protocol_id', e ->> 'sender', e ->> 'recipient', nullif(e -> 'body', 'null'::jsonb),
               nullif(e -> 'verdict', 'null'::jsonb), e ->> 'oops'
        FROM jsonb_array_elements(c -> 'log') WITH ORDINALITY AS t(e, i) ORDER BY i;
    INSERT INTO ep_outbox (message_id, flow_id, sender, recipient, type, body, date, in_reply_to, refs,
                           note,
                           status, attempts, created_at)
        SELECT e ->> 'message_id', e ->> 'flow_id', e ->> 'sender', e ->> 'recipient', e ->> 'type',
               e -> 'body', (e ->> 'date')::timestamptz, e ->> 'in_reply_to', e -> 'refs', e ->> 'note',
               'pending', 0, v_now
        FROM jsonb_array_elements(c -> 'outbox') WITH ORDINALITY AS t(e, i) ORDER BY i
        ON CONFLICT DO NOTHING;
    IF c ->> 'proof_fate' = 'spend' THEN
        UPDATE ep_proofs SET status = 'spent', verdict = c -> 'proof_verdict', spent_at = v_now
            WHERE chain = c ->> 'chain' AND proof_key = c ->> 'proof_key' AND owner_local = v_local
              AND owner_message = coalesce(v_mid, '');
    ELSIF c ->> 'proof_fate' = 'release' THEN
        DELETE FROM ep_proofs WHERE chain = c ->> 'chain' AND proof_key = c ->> 'proof_key'
            AND owner_local = v_local AND owner_message = coalesce(v_mid, '') AND status = 'held';
    END IF;
    IF c ->> 'replay_fate' = 'done' THEN
        UPDATE ep_replay SET status = 'done', outcome = c -> 'outcome'
            WHERE local = v_local AND sender = c ->> 'sender' AND protocol_id = c ->> 'protocol_id'
              AND owner = coalesce(v_mid, '');
    ELSIF c ->> 'replay_fate' = 'release' THEN
        DELETE FROM ep_replay WHERE local = v_local AND sender = c ->> 'sender'
            AND protocol_id = c ->> 'protocol_id' AND owner = coalesce(v_mid, '');
    END IF;
    RETURN 'ok';
END $$
"""

# v4: the begin call commits without waiting for its WAL flush. The step's commit call
# is synchronous and flushes the WAL up to its own record, which includes the begin's;
# a server crash in between forgets the claim and the step is redone in full, exactly
# as if the crash had come before the begin.
_PG_BEGIN_V4 = _PG_BEGIN.replace(
    "BEGIN\n    INSERT INTO ep_inbound",
    "BEGIN\n    PERFORM set_config('synchronous_commit', 'off', true);\n    INSERT INTO ep_inbound",
    1,
)

# v6: a proof held by another message still being handled answers `busy` (that
# presentation may fail and release it), one held by a message whose claim ran out is
# taken over; only a spent proof is `proof_replayed`. Same rule as _sql.py.
_PG_PROOF_V4 = """            SELECT owner_local, owner_message INTO r FROM ep_proofs
                WHERE chain = p_chain AND proof_key = p_key;
            IF NOT FOUND OR r.owner_local <> p_local OR r.owner_message <> p_mid THEN
                RETURN jsonb_build_object('status', 'proof_replayed');
            END IF;"""
_PG_PROOF_V6 = """            SELECT p.owner_local, p.owner_message, p.status AS pstatus, i.status AS istatus,
                   i.lease_until AS ilease
                INTO r FROM ep_proofs p LEFT JOIN ep_inbound i
                    ON i.local = p.owner_local AND i.message_id = p.owner_message
                WHERE p.chain = p_chain AND p.proof_key = p_key FOR UPDATE OF p;
            IF NOT FOUND THEN
                RETURN jsonb_build_object('status', 'busy');
            END IF;
            IF r.owner_local <> p_local OR r.owner_message <> p_mid THEN
                IF r.pstatus <> 'held' THEN
                    RETURN jsonb_build_object('status', 'proof_replayed');
                END IF;
                IF r.istatus = 'claimed' AND r.ilease > p_now THEN
                    RETURN jsonb_build_object('status', 'busy');
                END IF;
                UPDATE ep_proofs SET owner_local = p_local, owner_message = p_mid
                    WHERE chain = p_chain AND proof_key = p_key AND status = 'held';
            END IF;"""
assert _PG_PROOF_V4 in _PG_BEGIN_V4
_PG_BEGIN_V6 = _PG_BEGIN_V4.replace(_PG_PROOF_V4, _PG_PROOF_V6, 1)

# v10 (PostgreSQL): the two codecs compaction uses (SQLite registers the same two on its
# connection: ledger/compacted.py), and the step functions reading a compacted pair (its
# digest; its outcome from the original claim) and writing no verdict on a spent proof.
_PG_DIGEST = r"""
CREATE OR REPLACE FUNCTION ep_digest(h text) RETURNS bytea LANGUAGE sql IMMUTABLE AS $$
    SELECT substring(CASE WHEN h ~ '^[0-9a-f]{64}$' THEN decode(h, 'hex')
                          ELSE sha256(convert_to(h, 'UTF8')) END FROM 1 FOR 16)
$$
"""
_PG_SMALL = r"""
CREATE OR REPLACE FUNCTION ep_small(o jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'status', CASE WHEN jsonb_typeof(o -> 'status') = 'string' AND o ->> 'status' <> ''
                       THEN o ->> 'status' ELSE 'compacted' END,
        'flow_id', CASE WHEN jsonb_typeof(o -> 'flow_id') = 'string' THEN o -> 'flow_id' END))
$$
"""
_PG_BEGIN_V10 = _PG_BEGIN_V6
for _old, _new in (
    ("    queued jsonb;\n", "    queued jsonb;\n    recorded jsonb;\n"),
    ("SELECT owner, content_hash, status, outcome INTO r FROM ep_replay",
     "SELECT owner, content_hash, digest, status, outcome INTO r FROM ep_replay"),
    ("IF r.content_hash <> p_hash THEN",
     "IF (CASE WHEN r.digest IS NULL THEN r.content_hash <> p_hash\n"
     "                    ELSE r.digest <> ep_digest(p_hash) END) THEN"),
    ("                queued := coalesce(r.outcome -> 'outbox', '[]'::jsonb);",
     "                recorded := coalesce(r.outcome, (SELECT i.outcome FROM ep_inbound i\n"
     "                    WHERE i.local = p_local AND i.message_id = r.owner), ep_small('{}'::jsonb));\n"
     "                queued := coalesce(recorded -> 'outbox', '[]'::jsonb);"),
    ("outcome = r.outcome || jsonb_build_object", "outcome = recorded || jsonb_build_object"),
    ("'retransmission_of', r.outcome -> 'message_id')", "'retransmission_of', recorded -> 'message_id')"),
    ("'outcome', r.outcome,\n", "'outcome', recorded,\n"),
):
    assert _old in _PG_BEGIN_V10, _old
    _PG_BEGIN_V10 = _PG_BEGIN_V10.replace(_old, _new, 1)
_PG_COMMIT_V10 = _PG_COMMIT.replace(
    "SET status = 'spent', verdict = c -> 'proof_verdict', spent_at = v_now",
    "SET status = 'spent', spent_at = v_now", 1)
assert _PG_COMMIT_V10 != _PG_COMMIT

# v11 (PostgreSQL): the commit call writes an outbox row's Auto-Submitted keyword, and a
# commit's outbox rows `held` (with the reason as last error) when it is not answered.
_PG_COMMIT_V11 = _PG_COMMIT_V10.replace(
    """                           note,
                           status, attempts, created_at)""",
    """                           note, auto_submitted,
                           status, attempts, created_at, last_error)""", 1).replace(
    """e ->> 'in_reply_to', e -> 'refs', e ->> 'note',
               'pending', 0, v_now""",
    """e ->> 'in_reply_to', e -> 'refs', e ->> 'note',
               e ->> 'auto_submitted', CASE WHEN c ->> 'hold' IS NULL THEN 'pending' ELSE 'held' END,
               0, v_now, c ->> 'hold'""", 1)
assert _PG_COMMIT_V11.count("auto_submitted") == 2

# Migrations whose statements differ per dialect, given as ready statement lists.
DIALECT_MIGRATIONS: dict[int, tuple[str, dict[str, tuple[str, ...]]]] = {
    3: ("server-side step functions (PostgreSQL)", {"sqlite": (), "postgres": (_PG_BEGIN, _PG_COMMIT)}),
    4: ("begin call commits asynchronously (PostgreSQL)", {"sqlite": (), "postgres": (_PG_BEGIN_V4,)}),
    6: ("a proof held by a live message is busy, not replayed (PostgreSQL)",
        {"sqlite": (), "postgres": (_PG_BEGIN_V6,)}),
    10: ("", {"sqlite": (), "postgres": (_PG_DIGEST, _PG_SMALL, _PG_BEGIN_V10, _PG_COMMIT_V10)}),
    11: ("", {"sqlite": (), "postgres": (_PG_COMMIT_V11,)}),
}


def steps(dialect: Dialect) -> list[tuple[int, str, list[str]]]:
    """Every migration in order: (version, name, statements for this dialect)."""
    found = {v: (name, statements(sql, dialect)) for v, name, sql in MIGRATIONS}
    for v, (name, per) in DIALECT_MIGRATIONS.items():  # a version may have both parts
        base_name, stmts = found.get(v, (name, []))
        found[v] = (base_name, stmts + list(per[dialect]))
    return [(v, name, stmts) for v, (name, stmts) in sorted(found.items())]


LATEST = max([v for v, _, _ in MIGRATIONS] + list(DIALECT_MIGRATIONS))
