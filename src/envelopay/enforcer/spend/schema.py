"""The spend side's tables and statements (beside the send side's, on the same store): the
migrator's steps (SPEND_MIGRATIONS) and every named statement of `PaymentStore` (SQL)."""

from __future__ import annotations

from envelopay.enforcer.common.state_table import sql_list
from envelopay.enforcer.send.schema import AGENT_COLS
from envelopay.enforcer.spend.intent import IN_FLIGHT, INTENT_STATES, IntentState
from envelopay.enforcer.spend.states import INTENTS, Move
from envelopay.persist import Dialect, Migrations, Tx
from envelopay.persist import Step as MigrationStep

__all__ = ["ACTIVE_SUB", "QUEUE_GROUPS", "SCHEMA", "SPEND_MIGRATIONS", "SQL"]

# The predicates of the partial indexes, written once: a query uses such an index only
# when its WHERE holds the index's own term.
_IN_FLIGHT = f"state IN ({', '.join(repr(s) for s in ('APPROVED', *IN_FLIGHT))})"
_DECIDED = "(decided_at IS NOT NULL OR state = 'PENDING')"
# The approval queue's order: held first, then approved, failed, rejected, then the rest
# of what an operator decided (each group newest first).
QUEUE_GROUPS: tuple[tuple[IntentState, ...], ...] = (
    ("PENDING",), ("APPROVED",), ("FAILED",), ("REJECTED",),
    ("RESERVED", "SIGNED", "BROADCAST", "PAID", "SENT"),
)

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS enf_wallets (
        id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        chain TEXT NOT NULL,
        address TEXT NOT NULL,
        label TEXT NOT NULL,
        sealed TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        UNIQUE (agent_id, chain, label))""",
    """CREATE TABLE IF NOT EXISTS enf_spend_policies (
        agent_id TEXT PRIMARY KEY,
        policy TEXT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS enf_spend_counters (
        agent_id TEXT NOT NULL,
        asset TEXT NOT NULL,
        win TEXT NOT NULL,
        slot TEXT NOT NULL,
        spent BIGINT NOT NULL,
        PRIMARY KEY (agent_id, asset, win, slot))""",
    f"""CREATE TABLE IF NOT EXISTS enf_payments (
        id TEXT PRIMARY KEY,
        agent_id TEXT NOT NULL,
        idem_key TEXT NOT NULL,
        invoice_key TEXT,
        kind TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in INTENT_STATES)})),
        code TEXT NOT NULL,
        reason TEXT NOT NULL,
        request TEXT NOT NULL,
        chain TEXT NOT NULL,
        token TEXT NOT NULL,
        amount BIGINT NOT NULL,
        decimals INTEGER NOT NULL,
        payee TEXT NOT NULL,
        wallet TEXT NOT NULL,
        wallet_id TEXT NOT NULL,
        invoice_ref TEXT,
        message_id TEXT NOT NULL,
        taken TEXT NOT NULL,
        tx_id TEXT,
        tx_blob TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        decided_at DOUBLE PRECISION,
        decided_by TEXT,
        updated_at DOUBLE PRECISION NOT NULL,
        deliverer TEXT,
        compacted_at DOUBLE PRECISION,
        UNIQUE (agent_id, idem_key),
        UNIQUE (agent_id, invoice_key))""",
    # No index on `state` alone: every query by state reads a partial index below, and
    # one more B-tree would be written at each of a payment's three commits.
    "DROP INDEX IF EXISTS enf_payments_state",
    # Partial indexes holding only what the queue and the in-flight pass read: a plan on
    # `state` alone cannot tell that in-flight intents are few among millions sent (it
    # walked the whole table, tests/enforcer/test_plans.py), and an OR across two columns
    # is no index search at all.
    f"CREATE INDEX IF NOT EXISTS enf_payments_in_flight ON enf_payments (created_at) WHERE {_IN_FLIGHT}",
    f"CREATE INDEX IF NOT EXISTS enf_payments_decided ON enf_payments (state, created_at) WHERE {_DECIDED}",
    "CREATE UNIQUE INDEX IF NOT EXISTS enf_payments_tx ON enf_payments (tx_id)",
]
# Columns added after the table's first release, each nullable (no table rewrite), added
# where missing: the PAY's deliverer (the store instance that moved the money and
# delivers its email), and when retention compacted a finished intent.
_ADDED = (("deliverer", "TEXT"), ("compacted_at", "DOUBLE PRECISION"))
# What needs those columns (an index naming one cannot be made before it exists).
_AFTER_ADDED = [
    # Retention (enforcer/service/retention.py) walks finished intents not compacted yet, oldest first.
    "CREATE INDEX IF NOT EXISTS enf_payments_done ON enf_payments (updated_at)"
    " WHERE state IN ('SENT', 'FAILED', 'REJECTED') AND compacted_at IS NULL",
    "CREATE INDEX IF NOT EXISTS enf_spend_counters_slot ON enf_spend_counters (win, slot)",
]

def _add_columns(x: Tx, dialect: Dialect) -> None:
    """The columns of `_ADDED` a table made by an older release lacks."""
    if dialect == "postgres":
        sql = ("SELECT column_name AS name FROM information_schema.columns"
               " WHERE table_schema = current_schema() AND table_name = 'enf_payments'")
    else:
        sql = "SELECT name FROM pragma_table_info('enf_payments')"
    have = {str(r["name"]) for r in x.all(sql)}
    for name, kind in _ADDED:
        if name not in have:
            x.exec(f"ALTER TABLE enf_payments ADD COLUMN {name} {kind}")


def _after_added(x: Tx, dialect: Dialect) -> None:
    _add_columns(x, dialect)
    for stmt in _AFTER_ADDED:
        x.exec(stmt)


# The console's activity pages (PaymentStore.activity) walk these, newest first: all
# intents, or one agent's, without sorting the table.
_ACTIVITY = (
    "CREATE INDEX IF NOT EXISTS enf_payments_activity ON enf_payments (created_at, id)",
    "CREATE INDEX IF NOT EXISTS enf_payments_agent_activity ON enf_payments (agent_id, created_at, id)",
)

# The spend side's schema on the one migrator (envelopay.persist). Step 1 is what every
# release before it ran at open (all IF NOT EXISTS), step 2 the columns it added where
# missing and the indexes on them: a database one of them made is adopted by running both.
SPEND_MIGRATIONS = Migrations(
    "enforcer_spend",
    (
        MigrationStep(1, "wallets, spend policies and counters, payment intents",
                      {"sqlite": SCHEMA, "postgres": SCHEMA}),
        MigrationStep(2, "deliverer, compacted_at; retention indexes",
                      {"sqlite": (), "postgres": ()}, python=_after_added),
        MigrationStep(3, "activity indexes", {"sqlite": _ACTIVITY, "postgres": _ACTIVITY}),
    ),
)


_COLS = (
    "p.id, p.agent_id, p.idem_key, p.invoice_key, p.kind, p.state, p.code, p.reason, p.request, p.chain,"
    " p.token, p.amount, p.decimals, p.payee, p.wallet, p.wallet_id, p.invoice_ref, p.message_id,"
    " p.taken, p.tx_id, p.tx_blob, p.created_at, p.decided_at, p.decided_by, a.name AS agent_name,"
    " p.deliverer"
)
_FROM = " FROM enf_payments p LEFT JOIN enf_agents a ON a.id = p.agent_id"
# The intent's own agent, by its key: a subquery over every ACTIVE agent costs SQLite a
# pass over the whole table per statement (8.6 ms at 10,000 agents, against 0.01 ms).
# FAILED only from the states the intent table allows it from (states.INTENTS).
_FAILABLE = sql_list(INTENTS.sources(Move.FAIL))
ACTIVE_SUB = "SELECT 1 FROM enf_agents a WHERE a.id = enf_payments.agent_id AND a.status = 'ACTIVE'"
_ACTIVE = f" AND EXISTS ({ACTIVE_SUB})"


_A_COLS = ", ".join(f"a.{c}" for c in AGENT_COLS.split(", "))
_WALLET_ORDER = "ORDER BY CASE label WHEN 'default' THEN 0 ELSE 1 END, created_at LIMIT 1"

SQL = {
    # The agent by token, its spend policy, the intent under the call's key and the wallet
    # on the call's chain: one read for the whole decision (always fresh: no cache can let
    # a killed agent through, or an old policy).
    "context": f"SELECT {_A_COLS},"
    " (SELECT policy FROM enf_spend_policies WHERE agent_id = a.id) AS policy,"
    " (SELECT id FROM enf_payments WHERE agent_id = a.id AND idem_key = ?) AS prior_id,"
    " w.id AS wallet_id, w.address AS wallet_address, w.label AS wallet_label,"
    " w.created_at AS wallet_created_at, w.sealed AS sealed"
    " FROM enf_agents a LEFT JOIN enf_wallets w ON w.id ="
    f" (SELECT id FROM enf_wallets WHERE agent_id = a.id AND chain = ? {_WALLET_ORDER})"
    " WHERE a.token_hash = ?",
    "insert_wallet": "INSERT INTO enf_wallets (id, agent_id, chain, address, label, sealed, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
    "wallets": "SELECT id, agent_id, chain, address, label, created_at FROM enf_wallets WHERE agent_id = ?"
    " ORDER BY chain, label",
    "wallet_for": "SELECT id, agent_id, chain, address, label, created_at FROM enf_wallets"
    f" WHERE agent_id = ? AND chain = ? {_WALLET_ORDER}",
    "sealed": "SELECT sealed FROM enf_wallets WHERE id = ? AND agent_id = ?",
    "put_policy": "INSERT INTO enf_spend_policies (agent_id, policy, updated_at) VALUES (?, ?, ?)"
    " ON CONFLICT (agent_id) DO UPDATE SET policy = excluded.policy, updated_at = excluded.updated_at",
    "policy": "SELECT policy FROM enf_spend_policies WHERE agent_id = ?",
    # One conditional increment of the amount: the row is created only if the amount fits,
    # and raised only if the sum still fits. Never read-then-write.
    "take_spend": "INSERT INTO enf_spend_counters (agent_id, asset, win, slot, spent)"
    " SELECT ?, ?, ?, ?, CAST(? AS BIGINT) WHERE CAST(? AS BIGINT) <= CAST(? AS BIGINT)"
    " ON CONFLICT (agent_id, asset, win, slot)"
    " DO UPDATE SET spent = enf_spend_counters.spent + excluded.spent"
    # spent <= cap - amount, not spent + amount <= cap: the sum of two in-range amounts can
    # pass 2^63 and PostgreSQL raises there (bigint out of range) where SQLite refuses; the
    # difference of two amounts in range never leaves it. Both stores refuse alike.
    " WHERE enf_spend_counters.spent <= CAST(? AS BIGINT) - excluded.spent RETURNING spent",
    "give_spend": "UPDATE enf_spend_counters SET spent = spent - CAST(? AS BIGINT)"
    " WHERE agent_id = ? AND asset = ? AND win = ? AND slot = ? AND spent >= CAST(? AS BIGINT)",
    "spent": "SELECT spent FROM enf_spend_counters WHERE agent_id = ? AND asset = ? AND win = ? AND slot = ?",
    "insert_intent": "INSERT INTO enf_payments (id, agent_id, idem_key, invoice_key, kind, state, code,"
    " reason,"
    " request, chain, token, amount, decimals, payee, wallet, wallet_id, invoice_ref, message_id, taken,"
    " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT DO NOTHING RETURNING id",
    "by_id": f"SELECT {_COLS}{_FROM} WHERE p.id = ?",
    "by_key": f"SELECT {_COLS}{_FROM} WHERE p.agent_id = ? AND p.idem_key = ?",
    "by_invoice": f"SELECT {_COLS}{_FROM} WHERE p.agent_id = ? AND p.invoice_key = ?",
    "in_flight": f"SELECT {_COLS}{_FROM} WHERE {_IN_FLIGHT} ORDER BY p.created_at",
    # One state of the approval queue, newest first (PaymentStore.queue orders the states).
    "queue_state": f"SELECT {_COLS}{_FROM} WHERE {_DECIDED} AND state = ?"
    " ORDER BY p.created_at DESC LIMIT ?",
    # The console's activity: every intent, newest first, before a (time, id).
    "activity": f"SELECT {_COLS}{_FROM} WHERE (p.created_at, p.id) < (?, ?)"
    " ORDER BY p.created_at DESC, p.id DESC LIMIT ?",
    "activity_of": f"SELECT {_COLS}{_FROM} WHERE (p.created_at, p.id) < (?, ?) AND p.agent_id = ?"
    " ORDER BY p.created_at DESC, p.id DESC LIMIT ?",
    "approve": "UPDATE enf_payments SET state = 'APPROVED', decided_by = ?, decided_at = ?, updated_at = ?"
    f" WHERE id = ? AND state = 'PENDING'{_ACTIVE} RETURNING id",
    # An approval bound to what the operator was shown: the spend policy its content hash
    # covered must still be the stored one, in the same statement that approves (a policy
    # changed between the check and the approval finds no row; nothing is decided).
    "approve_bound": "UPDATE enf_payments SET state = 'APPROVED', decided_by = ?, decided_at = ?,"
    f" updated_at = ? WHERE id = ? AND state = 'PENDING'{_ACTIVE}"
    " AND COALESCE((SELECT sp.policy FROM enf_spend_policies sp WHERE sp.agent_id = enf_payments.agent_id),"
    " '') = ? RETURNING id",
    "reject": "UPDATE enf_payments SET state = 'REJECTED', decided_by = ?, decided_at = ?, updated_at = ?,"
    " reason = ? WHERE id = ? AND state = 'PENDING' RETURNING id",
    # The transitions toward money moving require the agent to be ACTIVE in the same
    # statement: a kill committed before them wins; one committed after comes too late.
    "claim": f"UPDATE enf_payments SET state = 'RESERVED', updated_at = ? WHERE id = ? AND state = 'APPROVED'"
    f"{_ACTIVE} RETURNING id",
    "signed": "UPDATE enf_payments SET state = 'SIGNED', tx_id = ?, tx_blob = ?, updated_at = ?"
    f" WHERE id = ? AND state = 'RESERVED'{_ACTIVE} RETURNING id",
    # The live path's one write between signing and broadcasting: the signed tx id and
    # bytes recorded, and the broadcast claimed, in one statement that requires ACTIVE.
    # The process that claims the broadcast delivers the PAY: it records itself as the
    # deliverer in the same statement (no other process delivers while it lives).
    "signed_broadcast": "UPDATE enf_payments SET state = 'BROADCAST', tx_id = ?, tx_blob = ?, deliverer = ?,"
    f" updated_at = ? WHERE id = ? AND state = 'RESERVED'{_ACTIVE} RETURNING id",
    "broadcast": "UPDATE enf_payments SET state = 'BROADCAST', deliverer = ?, updated_at = ?"
    " WHERE id = ? AND state = 'SIGNED'"
    f"{_ACTIVE} RETURNING id",
    "paid": "UPDATE enf_payments SET state = 'PAID', updated_at = ? WHERE id = ? AND state = 'BROADCAST'"
    " RETURNING id",
    # From PAID, or straight from BROADCAST once the chain confirmed it on the live path
    # (PAID is recorded only when the email could not go out at once: recovery asks the
    # chain about a BROADCAST intent first, so that record is no durability point).
    "sent": "UPDATE enf_payments SET state = 'SENT', reason = ?, updated_at = ?"
    " WHERE id = ? AND state IN ('BROADCAST', 'PAID') RETURNING id",
    # The email did not go now: its deliverer lets go, so any process may finish it.
    "paid_note": "UPDATE enf_payments SET state = 'PAID', reason = ?, deliverer = NULL, updated_at = ?"
    " WHERE id = ? AND state IN ('BROADCAST', 'PAID') RETURNING id",
    "deliverer": "SELECT deliverer FROM enf_payments WHERE id = ?",
    # Taking the PAY's delivery over from the deliverer seen (none, this process, or one
    # found dead): a compare-and-set, so of two processes taking it, one gets a row back.
    "take_delivery": "UPDATE enf_payments SET deliverer = ?, updated_at = ?"
    " WHERE id = ? AND state IN ('BROADCAST', 'PAID')"
    " AND (deliverer = ? OR (deliverer IS NULL AND CAST(? AS TEXT) IS NULL)) RETURNING id",
    "note": "UPDATE enf_payments SET reason = ?, updated_at = ? WHERE id = ? AND state = ?",
    # FAILED only from states where no money has moved or can still move.
    "fail": "UPDATE enf_payments SET state = 'FAILED', code = ?, reason = ?, invoice_key = NULL,"
    " updated_at = ?"
    f" WHERE id = ? AND state = ? AND state IN ({_FAILABLE}) RETURNING id",
    "sent_orders": "SELECT request, message_id FROM enf_sends WHERE agent_id = ? AND state = 'SENT'"
    " AND request LIKE ? AND request LIKE ?",
}
