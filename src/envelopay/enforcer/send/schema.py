"""The send side's tables and statements: the migrator's steps (SEND_MIGRATIONS) and every
named statement of `EnforcerStore`, written once with '?' placeholders (SQL), with
PostgreSQL's own where READ COMMITTED needs more (PG_SQL)."""

from __future__ import annotations

from envelopay.persist import Migrations
from envelopay.persist import Step as MigrationStep

__all__ = ["AGENT_COLS", "PG_SQL", "REFUSALS", "SEND_COLS", "SEND_MIGRATIONS", "SQL"]

SCHEMA = [
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
ACTIVITY_INDEXES = (
    "CREATE INDEX IF NOT EXISTS enf_sends_activity ON enf_sends (created_at, id)",
    "CREATE INDEX IF NOT EXISTS enf_sends_agent_activity ON enf_sends (agent_id, created_at, id)",
)

# Requests the enforcer refused outright (an identified agent's: a shape it does not
# accept, killed, not composable, a duplicate, a spend check), kept for the console's
# activity: what was asked, the code and the reason. Nothing else reads them; retention
# removes them with the finished sends.
REFUSALS = (
    """CREATE TABLE IF NOT EXISTS enf_refusals (
        id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        side TEXT NOT NULL CHECK (side IN ('send', 'spend')),
        operation TEXT NOT NULL,
        code TEXT NOT NULL,
        reason TEXT NOT NULL,
        summary TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS enf_refusals_activity ON enf_refusals (created_at, id)",
    "CREATE INDEX IF NOT EXISTS enf_refusals_agent_activity ON enf_refusals (agent_id, created_at, id)",
)

# The send side's schema, one migrator step per change (envelopay.persist). Step 1 is the
# schema as every release before the migrator made it, all IF NOT EXISTS: a database one of
# them created is adopted by running it again.
SEND_MIGRATIONS = Migrations(
    "enforcer_send",
    (
        MigrationStep(
            1, "agents, counters, sends, claims, outcomes", {"sqlite": SCHEMA, "postgres": SCHEMA}
        ),
        MigrationStep(2, "activity indexes", {"sqlite": ACTIVITY_INDEXES, "postgres": ACTIVITY_INDEXES}),
        MigrationStep(3, "refused requests", {"sqlite": REFUSALS, "postgres": REFUSALS}),
    ),
)

AGENT_COLS = "id, name, address, status, hourly_cap, daily_cap, allow"
REFUSAL_COLS = (
    "r.id, r.agent_id, r.side, r.operation, r.code, r.reason, r.summary, r.created_at, a.name AS agent_name"
)
SEND_COLS = (
    "s.id, s.agent_id, s.state, s.reason, s.request, s.message_id, s.created_at, s.decided_at,"
    " s.decided_by, a.name AS agent_name"
)

# (statement, parameters) pairs, written once with '?' placeholders.
SQL = {
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
    "get_send": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE s.id = ?",
    "send_by_message_id": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a"
    " ON a.id = s.agent_id WHERE s.agent_id = ? AND s.message_id = ? ORDER BY s.created_at LIMIT 1",
    "queue_state": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.decided_at IS NOT NULL OR s.state = 'PENDING') AND s.state = ?"
    " ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    # The console's activity: every recorded send, newest first, before a (time, id).
    "insert_refusal": "INSERT INTO enf_refusals (id, agent_id, side, operation, code, reason, summary,"
    " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
    "refusals": f"SELECT {REFUSAL_COLS} FROM enf_refusals r LEFT JOIN enf_agents a ON a.id = r.agent_id"
    " WHERE (r.created_at, r.id) < (?, ?) ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
    "refusals_of": f"SELECT {REFUSAL_COLS} FROM enf_refusals r LEFT JOIN enf_agents a ON a.id = r.agent_id"
    " WHERE (r.created_at, r.id) < (?, ?) AND r.agent_id = ? ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
    "activity": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.created_at, s.id) < (?, ?) ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    "activity_of": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.created_at, s.id) < (?, ?) AND s.agent_id = ? ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    "queue_state_before": f"SELECT {SEND_COLS} FROM enf_sends s LEFT JOIN enf_agents a ON a.id = s.agent_id"
    " WHERE (s.decided_at IS NOT NULL OR s.state = 'PENDING') AND s.state = ?"
    " AND (s.created_at, s.id) < (?, ?) ORDER BY s.created_at DESC, s.id DESC LIMIT ?",
    # A decision: one conditional UPDATE; approval also requires the agent to be ACTIVE.
    # (SQLite: an autocommit write reads the latest commit under the one writer lock, so a
    # kill is either before it or after it. PostgreSQL: see PG_SQL.)
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
PG_SQL = {
    # The portable subquery reads the agent in the statement's snapshot: a kill committing
    # meanwhile is not seen, and the approval commits after the kill returned. FOR SHARE
    # locks the agent row: a kill in flight is waited for and its KILLED re-checked, and a
    # kill arriving later waits for this approval's commit. Still one conditional UPDATE.
    "approve": "UPDATE enf_sends SET state = 'APPROVED', decided_by = ?, decided_at = ?, updated_at = ?"
    " WHERE id = ? AND state = 'PENDING' AND EXISTS (SELECT 1 FROM enf_agents a"
    " WHERE a.id = enf_sends.agent_id AND a.status = 'ACTIVE' FOR SHARE) RETURNING id",
}
