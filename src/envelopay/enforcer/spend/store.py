"""The spend enforcer's tables, beside the send enforcer's, on the same store (SQLite or
PostgreSQL, through `EnforcerStore.execute_sql`): sealed wallets, spend policies, spend
counters and payment intents.

Every state change of an intent is one conditional UPDATE with its precondition in the
WHERE clause; a spend cap is one conditional increment of the amount. Nothing here reads
then writes. The statements are in schema.py, the intent record in intent.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envelopay.enforcer.common.batch import Batch, Step
from envelopay.enforcer.common.rows import first, newest_first
from envelopay.enforcer.send.backends import PostgresStore
from envelopay.enforcer.send.store import EnforcerStore, agent_row
from envelopay.enforcer.spend.intent import Context, Intent, IntentState, intent_row, wallet_row
from envelopay.enforcer.spend.policy import SpendPolicy, policy_json
from envelopay.enforcer.spend.schema import ACTIVE_SUB, QUEUE_GROUPS, SPEND_MIGRATIONS, SQL
from envelopay.enforcer.spend.vault import WalletRecord
from envelopay.persist import NamedRow

__all__ = ["PaymentStore"]


class PaymentStore:
    """Typed operations over an open EnforcerStore."""

    def __init__(self, store: EnforcerStore) -> None:
        self.store = store
        self._policies: dict[str, SpendPolicy] = {}
        self._sql = dict(SQL)
        if isinstance(store, PostgresStore):
            # Under READ COMMITTED the subquery reads a snapshot: without a share lock on
            # the agent row, a kill committing while the transition runs would not stop
            # it. FOR SHARE makes a concurrent kill wait for this statement (or this
            # statement wait for the kill, then see KILLED). SQLite runs one writer at a
            # time, so its statements are already ordered.
            for name in ("approve", "approve_bound", "claim", "signed", "signed_broadcast", "broadcast"):
                self._sql[name] = self._sql[name].replace(ACTIVE_SUB, ACTIVE_SUB + " FOR SHARE")

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
        return [wallet_row(r) for r in await self._x("wallets", (agent_id,))]

    async def wallet_for(self, agent_id: str, chain: str) -> WalletRecord | None:
        return first(await self._x("wallet_for", (agent_id, chain)), wallet_row)

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

    async def policy_text(self, agent_id: str) -> str:
        """The agent's spend policy as stored ("" when it has none), for `approve`."""
        rows = await self._x("policy", (agent_id,))
        return str(rows[0]["policy"]) if rows else ""

    def parse_policy(self, text: str) -> SpendPolicy:
        return self._policy(text or None)

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
        return first(await self._x("by_id", (intent_id,)), intent_row)

    async def by_key(self, agent_id: str, key: str) -> Intent | None:
        return first(await self._x("by_key", (agent_id, key)), intent_row)

    async def by_invoice(self, agent_id: str, invoice_key: str) -> Intent | None:
        return first(await self._x("by_invoice", (agent_id, invoice_key)), intent_row)

    async def activity(
        self, agent_id: str | None, limit: int, before: tuple[float, str] | None = None
    ) -> list[Intent]:
        """Payment intents in every state, newest first, optionally one agent's; `before`
        is the (created_at, id) of the previous page's last row."""
        return [intent_row(r) for r in await self._x(*newest_first("activity", agent_id, limit, before))]

    async def in_flight(self) -> list[Intent]:
        return [intent_row(r) for r in await self._x("in_flight", ())]

    async def queue(self, limit: int = 200) -> list[Intent]:
        """Held and decided intents, at most `limit`: PENDING first, then APPROVED, FAILED,
        REJECTED and the rest, each newest first; one index walk of at most `limit` rows
        per state."""
        out: list[Intent] = []
        for group in QUEUE_GROUPS:
            left = limit - len(out)
            rows = [intent_row(r) for state in group for r in await self._x("queue_state", (state, left))]
            rows.sort(key=lambda i: i.created_at, reverse=True)
            out += rows[: limit - len(out)]
            if len(out) >= limit:
                break
        return out

    async def approve(self, intent_id: str, by: str, now: float, policy: str | None = None) -> bool:
        """PENDING → APPROVED; with `policy` (policy_text's answer when the content hash
        was checked) only while that is still the agent's stored spend policy."""
        if policy is None:
            return bool(await self._x("approve", (by, now, now, intent_id)))
        return bool(await self._x("approve_bound", (by, now, now, intent_id, policy)))

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
