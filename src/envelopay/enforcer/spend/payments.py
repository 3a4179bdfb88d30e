"""The spend enforcer: one enforced operation, pay then send.

The enforcer decides the email and the payment together before anything moves: the send
checks (shape, identity, kill, sender pin, mail allowlist, mail caps) and the spend checks
(spend.py, in order) all pass, or nothing is signed and nothing is sent.

At most once, with recovery: an intent keyed by (agent, idempotency key) is recorded
before signing; the signed transaction's id (and bytes) before broadcasting; after a crash
the chain is asked about that id before anything else, and only those same bytes are ever
broadcast again. No second payment is signed for an intent. The PAY email after the
payment is at least once (payments_exec.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any

from envelopay import dkim
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.send.model import Agent
from envelopay.enforcer.spend.decide import blocked, call_key, decide
from envelopay.enforcer.spend.intent import IN_FLIGHT, Intent
from envelopay.enforcer.spend.invoices import (
    InvoiceSource,
    payee_refusal,
)
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.enforcer.spend.payments_exec import run
from envelopay.enforcer.spend.policy import (
    Refusal,
    SpendPolicy,
    check_payment_request,
)
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault, WalletRecord
from envelopay.errors import StoreError, UsageError
from envelopay.rails.amounts import human_amount
from envelopay.rails.custodial import CustodialPayer

__all__ = ["CRASH_ENV", "Payments", "crash_hook_from_env", "payment_summary"]

CRASH_ENV = "ENVELOPAY_ENFORCER_CRASH_AT"
CRASH_POINTS = ("after_intent", "after_sign", "after_broadcast", "after_record")


def crash_hook_from_env(env: Mapping[str, str] = os.environ) -> Callable[[str], None]:
    """Fault injection for the crash tests: SIGKILL this process the first time the live
    path reaches the named point (after_intent, after_sign, after_broadcast, after_record)."""
    point = env.get(CRASH_ENV, "")

    def hook(name: str) -> None:
        if point and name == point:
            os.kill(os.getpid(), signal.SIGKILL)

    return hook



def payment_summary(raw: Mapping[str, Any]) -> str:
    """What a payment call asked, in a line for the activity page (read loosely: it may be
    the malformed call being refused)."""
    if raw.get("invoice"):
        return f"INVOICE {str(raw.get('invoice'))[:120]}"
    amount, token, chain = (str(raw.get(k) or "") for k in ("amount", "token", "chain"))
    to = raw.get("to")
    to_text = ", ".join(str(x) for x in to) if isinstance(to, list) else str(to or "")
    asked = " ".join(x for x in (amount, token, f"on {chain}" if chain else "") if x)
    return " — ".join(x for x in (asked, f"to {to_text}" if to_text else "") if x)


class Payments:
    """Pay-then-send over an `Enforcer` (identities, mail policy, delivery) and a
    `PaymentStore` on the same store."""

    def __init__(
        self,
        enforcer: Enforcer,
        store: PaymentStore,
        vault: Vault | None,
        payers: Mapping[str, CustodialPayer],
        *,
        invoices: InvoiceSource | None = None,
        dns: dkim.DnsLookup | None = None,
        crash_hook: Callable[[str], None] | None = None,
        new_id: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        self.enforcer = enforcer
        self.store = store
        self.vault = vault
        self.payers = dict(payers)
        self.invoices = invoices
        self.dns = dns
        self.crash = crash_hook or crash_hook_from_env()
        self.new_id = new_id
        self._locks: dict[str, asyncio.Lock] = {}
        self._active: set[str] = set()

    @property
    def clock(self) -> Callable[[], float]:
        return self.enforcer.clock

    # -- the agent's operations -----------------------------------------------------------

    async def submit(self, kind: str, token: str | None, raw: Mapping[str, Any]) -> PaymentDisposition:
        """pay | pay_invoice | offer | accept. Never raises for a verdict. An identified
        agent's refused call is kept for the activity page (the send side's note_refusal)."""
        checked = check_payment_request(kind, raw)
        if isinstance(checked, Refusal):
            d = blocked(checked.code, checked.detail)
            await self.enforcer.note_refusal(token, "spend", kind, payment_summary(raw), d)
            return d
        try:
            # One read: the agent (identity from the token only), its spend policy, the
            # intent already under this key, and its wallet on this chain.
            key = call_key(checked)
            ctx = await self.store.context(hash_token(token), checked.chain, key) if token else None
            if ctx is None:
                return blocked("unknown_agent")
            d = blocked("killed") if ctx.agent.killed else await decide(self, ctx, checked)
        except StoreError as exc:
            return PaymentDisposition(status="failed", code="store_error", reason=f"store error: {exc}")
        if d.status == "blocked" and d.id is None:  # refused outright: no intent says so
            await self.enforcer.note_refusal(ctx.agent, "spend", kind, payment_summary(raw), d)
        return d

    async def _give_back(self, agent_id: str, taken: list[list[Any]]) -> None:
        for entry in taken:
            if entry[0] == "mail":
                await self.enforcer.store.give_back(agent_id, entry[1], entry[2])
            else:
                await self.store.give_spend(agent_id, entry[1], entry[2], entry[3], int(entry[4]))

    # -- reading ----------------------------------------------------------------------------

    def disposition(self, i: Intent) -> PaymentDisposition:
        status = {
            "PENDING": "pending_approval",
            "APPROVED": "pending_approval",
            "REJECTED": "blocked",
            "SENT": "paid_and_sent",
            "FAILED": "failed",
        }.get(i.state, "unknown")
        return PaymentDisposition(
            status=status,  # type: ignore[arg-type]  # the mapping's values are statuses
            code=i.code,
            reason=i.reason,
            id=i.id,
            approval_id=i.id if i.state in ("PENDING", "APPROVED") or i.decided_at is not None else None,
            tx_id=i.tx_id if i.state in ("BROADCAST", "PAID", "SENT") else None,
            message_id=i.message_id if i.state == "SENT" and i.request.get("mail") is not None else None,
            state=i.state.lower(),
            amount=str(i.amount),
            token=i.token,
            chain=i.chain,
            payee=i.payee or None,
            wallet=i.wallet or None,
        )

    async def resume(self, i: Intent) -> PaymentDisposition:
        """The intent's outcome; an in-flight intent no executor here holds is finished
        first (recovery), so a retried call heals what a crash left."""
        if i.state in IN_FLIGHT and i.id not in self._active:
            return await run(self, i.id, live=False)
        return self.disposition(i)

    async def status(self, token: str | None, intent_id: str) -> PaymentDisposition:
        try:
            agent = await self.enforcer.agent_for(token)
            i = await self.store.get(intent_id) if agent is not None and not agent.killed else None
            if agent is None or i is None or i.agent_id != agent.id:
                return PaymentDisposition(status="unknown", id=intent_id)
            d = await self.resume(i)
            return await self._answered(agent, i, d)
        except StoreError as exc:
            return PaymentDisposition(status="failed", code="store_error", reason=f"store error: {exc}")

    async def _answered(self, agent: Agent, i: Intent, d: PaymentDisposition) -> PaymentDisposition:
        """A sent payment the payee answered with an OOPS is `paid_refused`, with the
        payee's code: never `paid_and_sent` alone (the money moved, the work did not)."""
        mail = i.request.get("mail")
        if d.status != "paid_and_sent" or self.invoices is None or self.dns is None or not mail:
            return d
        pay_id = str((mail.get("body") or {}).get("id", ""))
        refused = await payee_refusal(
            self.invoices.answers(agent, i.message_id), payee=i.payee, pay_id=pay_id,
            message_id=i.message_id, dns=self.dns,
        )
        if refused is None:
            return d
        return replace(d, status="paid_refused", code=refused.code,
                       reason=f"the payee answered OOPS {refused.code}: {refused.note}"[:500])

    async def balances(self, token: str | None) -> dict[str, Any]:
        """The token's own wallets' addresses and balances: nothing else."""
        agent = await self.enforcer.agent_for(token)
        if agent is None:
            return {"status": "blocked", "code": "unknown_agent", "wallets": []}
        return await self.balances_of(agent)

    async def balances_of(self, agent: Agent) -> dict[str, Any]:
        out = []
        for w in await self.store.wallets(agent.id):
            entry: dict[str, Any] = w.to_json()
            payer = self.payers.get(w.chain)
            if payer is not None:
                try:
                    raw = await payer.balances(w.address)
                except Exception as exc:  # a rail fault is reported, not raised: balances are advisory
                    entry["error"] = f"balance lookup failed: {type(exc).__name__}"
                else:
                    entry["balances"] = {
                        sym: {"amount": str(v), "human": human_amount(v, _decimals(payer, sym))}
                        for sym, v in raw.items()
                    }
            out.append(entry)
        return {"agent": agent.name, "wallets": out}

    # -- operators ----------------------------------------------------------------------------

    async def create_wallet(
        self, agent_name: str, chain: str, *, label: str = "default", secret: bytes | None = None
    ) -> WalletRecord:
        if self.vault is None:
            raise UsageError("the enforcer has no vault key: start it with a vault secret or key file")
        agent = await self.enforcer.store.agent_by_name(agent_name)
        if agent is None:
            raise UsageError(f"no agent {agent_name!r}")
        payer = self.payers.get(chain)
        if payer is None:
            raise UsageError(f"no rail pays on {chain!r} here (configured: {sorted(self.payers) or 'none'})")
        key = secret if secret is not None else payer.new_secret()
        try:
            address = payer.address_of(key)
        except ValueError:
            raise UsageError(f"the imported key is not a valid {chain} key") from None
        record = WalletRecord(self.new_id(), agent.id, chain, address, label, self.clock())
        sealed = self.vault.seal(key, agent_id=agent.id, wallet_id=record.id)
        if not await self.store.add_wallet(record, sealed):
            raise UsageError(f"agent {agent_name!r} already has a {chain} wallet labelled {label!r}")
        return record

    async def wallets(self, agent_name: str) -> list[WalletRecord]:
        agent = await self.enforcer.store.agent_by_name(agent_name)
        return [] if agent is None else await self.store.wallets(agent.id)

    async def get_policy(self, agent_name: str) -> SpendPolicy | None:
        agent = await self.enforcer.store.agent_by_name(agent_name)
        return None if agent is None else await self.store.policy(agent.id)

    async def set_policy(self, agent_name: str, policy: SpendPolicy) -> bool:
        agent = await self.enforcer.store.agent_by_name(agent_name)
        if agent is None:
            return False
        await self.store.put_policy(agent.id, policy, self.clock())
        return True

    @contextlib.asynccontextmanager
    async def lock_for(self, wallet_id: str) -> AsyncIterator[None]:
        # One payment at a time per wallet between "latest blockhash" and "broadcast": two
        # payments signed against one blockhash could be one transaction. The asyncio lock
        # orders this process's tasks; the store's lock orders the processes sharing it.
        async with self._locks.setdefault(wallet_id, asyncio.Lock()), self.store.store.wallet_lock(wallet_id):
            yield


def _decimals(payer: CustodialPayer, symbol: str) -> int:
    asset = payer.asset(symbol)
    return asset.decimals if asset is not None else 0

