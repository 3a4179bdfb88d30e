"""The spend enforcer's tables, beside the send enforcer's, on the same store (SQLite or
PostgreSQL, through `EnforcerStore.execute_sql`): sealed wallets, spend policies, spend
counters and payment intents.

Every state change of an intent is one conditional UPDATE with its precondition in the
WHERE clause; a spend cap is one conditional increment of the amount. Nothing here reads
then writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envelopay.enforcer.common.batch import Batch, Step
from envelopay.enforcer.common.state_table import sql_list
from envelopay.enforcer.send.model import Agent
from envelopay.enforcer.send.store import AGENT_COLS, EnforcerStore, PostgresStore, agent_row
from envelopay.enforcer.spend.policy import SpendPolicy, policy_json
from envelopay.enforcer.spend.states import INTENTS, Move
from envelopay.enforcer.spend.vault import WalletRecord
from envelopay.persist import Dialect, Migrations, NamedRow, Tx
from envelopay.persist import Step as MigrationStep
from envelopay.rails.amounts import human_amount

__all__ = ["INTENT_STATES", "SPEND_MIGRATIONS", "Context", "Intent", "IntentState", "PaymentStore"]

IntentState = Literal[
    "PENDING", "APPROVED", "REJECTED", "RESERVED", "SIGNED", "BROADCAST", "PAID", "SENT", "FAILED"
]
INTENT_STATES: tuple[IntentState, ...] = (
    "PENDING",
    "APPROVED",
    "REJECTED",
    "RESERVED",
    "SIGNED",
    "BROADCAST",
    "PAID",
    "SENT",
    "FAILED",
)
IN_FLIGHT: tuple[IntentState, ...] = ("RESERVED", "SIGNED", "BROADCAST", "PAID")

# The predicates of the partial indexes, written once: a query uses such an index only
# when its WHERE holds the index's own term.
_IN_FLIGHT = f"state IN ({', '.join(repr(s) for s in ('APPROVED', *IN_FLIGHT))})"
_DECIDED = "(decided_at IS NOT NULL OR state = 'PENDING')"
# The approval queue's order: held first, then approved, failed, rejected, then the rest
# of what an operator decided (each group newest first).
_QUEUE_GROUPS: tuple[tuple[IntentState, ...], ...] = (
    ("PENDING",), ("APPROVED",), ("FAILED",), ("REJECTED",),
    ("RESERVED", "SIGNED", "BROADCAST", "PAID", "SENT"),
)

_SCHEMA = [
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
                      {"sqlite": _SCHEMA, "postgres": _SCHEMA}),
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
# FAILED only from the states the intent table allows it from (intent_states.INTENTS).
_FAILABLE = sql_list(INTENTS.sources(Move.FAIL))
_ACTIVE_SUB = "SELECT 1 FROM enf_agents a WHERE a.id = enf_payments.agent_id AND a.status = 'ACTIVE'"
_ACTIVE = f" AND EXISTS ({_ACTIVE_SUB})"


@dataclass(frozen=True, slots=True)
class Intent:
    """One payment intent (see SPEC.md "Spend enforcer" for its state machine)."""

    id: str
    agent_id: str
    idem_key: str
    invoice_key: str | None
    kind: str
    state: IntentState
    code: str
    reason: str
    request: dict[str, Any]  # {"payment": PaymentRequest JSON, "mail": SendRequest JSON}
    chain: str
    token: str
    amount: int
    decimals: int
    payee: str
    wallet: str
    wallet_id: str
    invoice_ref: str | None
    message_id: str
    taken: list[list[Any]]  # the cap increments to hand back if no money moves
    tx_id: str | None
    tx_blob: bytes | None
    created_at: float
    decided_at: float | None
    decided_by: str | None
    agent_name: str
    deliverer: str | None = None  # the store instance delivering the PAY (liveness.py)

    def human_amount(self) -> str:
        return human_amount(self.amount, self.decimals)

    def to_json(self) -> dict[str, Any]:
        """The queue row: no tx bytes, no key material."""
        return {
            "id": self.id,
            "kind": "payment",
            "operation": self.kind,
            "agent_id": self.agent_id,
            "agent": self.agent_name,
            "state": self.state,
            "code": self.code,
            "reason": self.reason,
            "amount": str(self.amount),
            "amount_human": self.human_amount(),
            "chain": self.chain,
            "token": self.token,
            "asset": f"{self.chain}/{self.token}",
            "to": self.payee,
            "payee": self.payee,
            "wallet": self.wallet,
            "invoice": self.invoice_ref,
            "subject": f"pay {self.human_amount()} {self.token} on {self.chain}", "type": self.kind,
            "tx_id": self.tx_id,
            "message_id": self.message_id,
            "created_at": self.created_at,
            "decided_at": self.decided_at,
            "decided_by": self.decided_by,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """What one payment call reads before deciding, in one statement: the token's agent,
    its spend policy, the intent already recorded under the call's key (its id), and the
    agent's wallet on the call's chain with its sealed key (opened only to sign)."""

    agent: Agent
    policy: SpendPolicy
    prior_id: str | None
    wallet: WalletRecord | None
    sealed: bytes | None


def _intent(row: NamedRow) -> Intent:
    blob, decided_at = row["tx_blob"], row["decided_at"]
    return Intent(
        id=row["id"],
        agent_id=row["agent_id"],
        idem_key=row["idem_key"],
        invoice_key=row["invoice_key"],
        kind=row["kind"],
        state=row["state"],
        code=row["code"],
        reason=row["reason"],
        request=json.loads(row["request"]),
        chain=row["chain"],
        token=row["token"],
        amount=int(row["amount"]),
        decimals=int(row["decimals"]),
        payee=row["payee"],
        wallet=row["wallet"],
        wallet_id=row["wallet_id"],
        invoice_ref=row["invoice_ref"],
        message_id=row["message_id"],
        taken=json.loads(row["taken"]),
        tx_id=row["tx_id"],
        tx_blob=bytes.fromhex(blob) if blob else None,
        created_at=float(row["created_at"]),
        decided_at=None if decided_at is None else float(decided_at),
        decided_by=row["decided_by"],
        agent_name=row["agent_name"] or "",
        deliverer=row["deliverer"],
    )


def _wallet(row: NamedRow) -> WalletRecord:
    return WalletRecord(
        row["id"], row["agent_id"], row["chain"], row["address"], row["label"], float(row["created_at"])
    )


_A_COLS = ", ".join(f"a.{c}" for c in AGENT_COLS.split(", "))
_WALLET_ORDER = "ORDER BY CASE label WHEN 'default' THEN 0 ELSE 1 END, created_at LIMIT 1"

_SQL = {
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


class PaymentStore:
    """Typed operations over an open EnforcerStore."""

    def __init__(self, store: EnforcerStore) -> None:
        self.store = store
        self._policies: dict[str, SpendPolicy] = {}
        self._sql = dict(_SQL)
        if isinstance(store, PostgresStore):
            # Under READ COMMITTED the subquery reads a snapshot: without a share lock on
            # the agent row, a kill committing while the transition runs would not stop
            # it. FOR SHARE makes a concurrent kill wait for this statement (or this
            # statement wait for the kill, then see KILLED). SQLite runs one writer at a
            # time, so its statements are already ordered.
            for name in ("approve", "claim", "signed", "signed_broadcast", "broadcast"):
                self._sql[name] = self._sql[name].replace(_ACTIVE_SUB, _ACTIVE_SUB + " FOR SHARE")

    async def open(self) -> None:
        """The spend tables at their latest version (the one migrator: a second open, or
        one by another process, finds them there and changes nothing)."""
        await self.store.migrate(SPEND_MIGRATIONS)

    async def _x(self, name: str, params: Sequence[Any]) -> list[NamedRow]:
        return await self.store.fetch(self._sql[name], params)

    # -- wallets and policies -------------------------------------------------------------

    async def add_wallet(self, record: WalletRecord, sealed: bytes) -> bool:
        return bool(
            await self._x(
                "insert_wallet",
                (
                    record.id,
                    record.agent_id,
                    record.chain,
                    record.address,
                    record.label,
                    sealed.hex(),
                    record.created_at,
                ),
            )
        )

    async def wallets(self, agent_id: str) -> list[WalletRecord]:
        return [_wallet(r) for r in await self._x("wallets", (agent_id,))]

    async def wallet_for(self, agent_id: str, chain: str) -> WalletRecord | None:
        rows = await self._x("wallet_for", (agent_id, chain))
        return _wallet(rows[0]) if rows else None

    async def sealed(self, wallet_id: str, agent_id: str) -> bytes | None:
        rows = await self._x("sealed", (wallet_id, agent_id))
        return bytes.fromhex(rows[0]["sealed"]) if rows else None

    async def context(self, token_hash: str, chain: str, key: str) -> Context | None:
        rows = await self._x("context", (key, chain, token_hash))
        if not rows:
            return None
        r = rows[0]
        wallet = None
        if r["wallet_id"] is not None:
            wallet = WalletRecord(
                r["wallet_id"], r["id"], chain, r["wallet_address"], r["wallet_label"],
                float(r["wallet_created_at"]),
            )
        return Context(
            agent=agent_row(r),
            policy=self._policy(r["policy"]),
            prior_id=r["prior_id"],
            wallet=wallet,
            sealed=bytes.fromhex(r["sealed"]) if r["sealed"] else None,
        )

    def _policy(self, text: str | None) -> SpendPolicy:
        # Parsed once per distinct text: the text itself is read fresh on every call.
        if text is None:
            return SpendPolicy()
        policy = self._policies.get(text)
        if policy is None:
            if len(self._policies) > 256:
                self._policies.clear()
            policy = self._policies[text] = SpendPolicy.from_json(json.loads(text))
        return policy

    async def put_policy(self, agent_id: str, policy: SpendPolicy, now: float) -> None:
        await self._x("put_policy", (agent_id, policy_json(policy), now))

    async def policy(self, agent_id: str) -> SpendPolicy:
        rows = await self._x("policy", (agent_id,))
        return self._policy(rows[0]["policy"] if rows else None)

    # -- spend counters -----------------------------------------------------------------

    async def take_spend(self, agent_id: str, asset: str, win: str, slot: str, amount: int, cap: int) -> bool:
        return bool(await self._x("take_spend", (agent_id, asset, win, slot, amount, amount, cap, cap)))

    async def give_spend(self, agent_id: str, asset: str, win: str, slot: str, amount: int) -> None:
        await self._x("give_spend", (amount, agent_id, asset, win, slot, amount))

    async def spent(self, agent_id: str, asset: str, win: str, slot: str) -> int:
        rows = await self._x("spent", (agent_id, asset, win, slot))
        return int(rows[0]["spent"]) if rows else 0

    # -- intents ------------------------------------------------------------------------

    async def insert_intent(self, i: Intent, now: float) -> bool:
        return bool(await self._x("insert_intent", self._intent_params(i, now)))

    @staticmethod
    def _intent_params(i: Intent, now: float) -> tuple[Any, ...]:
        return (
            i.id, i.agent_id, i.idem_key, i.invoice_key, i.kind, i.state, i.code, i.reason,
            json.dumps(i.request), i.chain, i.token, i.amount, i.decimals, i.payee, i.wallet,
            i.wallet_id, i.invoice_ref, i.message_id, json.dumps(i.taken), now, now,
        )

    def spend_step(self, agent_id: str, asset: str, win: str, slot: str, amount: int, cap: int) -> Step:
        return self._sql["take_spend"], (agent_id, asset, win, slot, amount, amount, cap, cap)

    async def reserve(self, caps: Sequence[Step], i: Intent, now: float) -> Batch:
        """The cap increments, in order, and the intent: one transaction, all or nothing.
        `refused_at` < len(caps) names the cap that refused; == len(caps), the key was
        taken by a concurrent call. Non-durable on PostgreSQL: the RESERVED intent moves
        no money, and the durable commit of its tx id (before any broadcast) flushes it."""
        return await self.store.transaction(
            [*caps, (self._sql["insert_intent"], self._intent_params(i, now))],
            require_rows=True,
            durable=False,
        )

    async def finish_sent(self, send: Step, intent_id: str, now: float) -> bool:
        """The send record and SENT, one transaction. Non-durable on PostgreSQL: if a
        database crash loses it, the intent is still BROADCAST or PAID and recovery sends
        the PAY again with its Message-ID (the email is at least once)."""
        batch = await self.store.transaction(
            [send, (self._sql["sent"], ("", now, intent_id))], durable=False
        )
        return bool(batch.rows[1])

    async def paid_note(self, intent_id: str, reason: str, now: float) -> bool:
        return bool(await self._x("paid_note", (reason, now, intent_id)))

    async def get(self, intent_id: str) -> Intent | None:
        rows = await self._x("by_id", (intent_id,))
        return _intent(rows[0]) if rows else None

    async def by_key(self, agent_id: str, key: str) -> Intent | None:
        rows = await self._x("by_key", (agent_id, key))
        return _intent(rows[0]) if rows else None

    async def by_invoice(self, agent_id: str, invoice_key: str) -> Intent | None:
        rows = await self._x("by_invoice", (agent_id, invoice_key))
        return _intent(rows[0]) if rows else None

    async def activity(
        self, agent_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[Intent]:
        """Payment intents in every state, newest first, optionally one agent's; `before`
        is the (created_at, id) of the previous page's last row."""
        at, ident = before if before is not None else (float("inf"), "")
        if agent_id is None:
            rows = await self._x("activity", (at, ident, limit))
        else:
            rows = await self._x("activity_of", (at, ident, agent_id, limit))
        return [_intent(r) for r in rows]

    async def in_flight(self) -> list[Intent]:
        return [_intent(r) for r in await self._x("in_flight", ())]

    async def queue(self, limit: int = 200) -> list[Intent]:
        """Held and decided intents, at most `limit`: PENDING first, then APPROVED, FAILED,
        REJECTED and the rest, each newest first; one index walk of at most `limit` rows
        per state."""
        out: list[Intent] = []
        for group in _QUEUE_GROUPS:
            left = limit - len(out)
            rows = [_intent(r) for state in group for r in await self._x("queue_state", (state, left))]
            rows.sort(key=lambda i: i.created_at, reverse=True)
            out += rows[: limit - len(out)]
            if len(out) >= limit:
                break
        return out

    async def approve(self, intent_id: str, by: str, now: float) -> bool:
        return bool(await self._x("approve", (by, now, now, intent_id)))

    async def reject(self, intent_id: str, by: str, reason: str, now: float) -> bool:
        return bool(await self._x("reject", (by, now, now, reason, intent_id)))

    async def claim(self, intent_id: str, now: float) -> bool:
        return bool(await self._x("claim", (now, intent_id)))

    async def mark_signed(self, intent_id: str, tx_id: str, blob: bytes, now: float) -> bool:
        return bool(await self._x("signed", (tx_id, blob.hex(), now, intent_id)))

    async def mark_signed_broadcast(self, intent_id: str, tx_id: str, blob: bytes, now: float) -> bool:
        """RESERVED → BROADCAST with the tx id and bytes, this store instance its deliverer."""
        return bool(
            await self._x("signed_broadcast", (tx_id, blob.hex(), self.store.instance, now, intent_id))
        )

    async def mark_broadcast(self, intent_id: str, now: float) -> bool:
        return bool(await self._x("broadcast", (self.store.instance, now, intent_id)))

    async def take_delivery(self, intent_id: str, now: float) -> bool:
        """Whether this store instance may deliver the intent's PAY now: it is its deliverer
        already, there is none, or the one recorded is dead (and this one took over)."""
        rows = await self._x("deliverer", (intent_id,))
        if not rows:
            return False
        seen: str | None = rows[0]["deliverer"]
        me = self.store.instance
        if seen is not None and seen != me and await self.store.alive(seen):
            return False
        return bool(await self._x("take_delivery", (me, now, intent_id, seen, seen)))

    async def mark_paid(self, intent_id: str, now: float) -> bool:
        return bool(await self._x("paid", (now, intent_id)))

    async def mark_sent(self, intent_id: str, reason: str, now: float) -> bool:
        return bool(await self._x("sent", (reason, now, intent_id)))

    async def note(self, intent_id: str, state: IntentState, reason: str, now: float) -> None:
        await self._x("note", (reason, now, intent_id, state))

    async def fail(self, intent_id: str, from_state: IntentState, code: str, reason: str, now: float) -> bool:
        return bool(await self._x("fail", (code, reason, now, intent_id, from_state)))

    async def sent_orders(self, agent_id: str, order_id: str) -> list[tuple[dict[str, Any], str | None]]:
        """The agent's delivered ORDERs whose body id is `order_id` (request JSON, Message-ID)."""
        rows = await self._x("sent_orders", (agent_id, '%"type": "order"%', f"%{json.dumps(order_id)}%"))
        return [(json.loads(r["request"]), r["message_id"]) for r in rows]
