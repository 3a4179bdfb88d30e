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
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import Any

from envelopay import dkim
from envelopay.enforcer.common.batch import Step
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.send.model import Agent, Disposition
from envelopay.enforcer.send.policy import allowlisted, check_request
from envelopay.enforcer.spend.invoices import (
    ALREADY_PAID,
    MISMATCH,
    NOT_FOUND,
    InvoiceSource,
    bind_invoice,
    payee_refusal,
)
from envelopay.enforcer.spend.legs import leg_message
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.enforcer.spend.payments_exec import run
from envelopay.enforcer.spend.policy import (
    PaymentRequest,
    Refusal,
    SpendPolicy,
    asset_key,
    check_limits,
    check_payee,
    check_payment_request,
    check_route,
)
from envelopay.enforcer.spend.store import IN_FLIGHT, Context, Intent, PaymentStore
from envelopay.enforcer.spend.vault import Vault, WalletRecord
from envelopay.errors import StoreError, UsageError
from envelopay.protocol.compose import message_json
from envelopay.rails.amounts import human_amount
from envelopay.rails.custodial import CustodialPayer

__all__ = ["CRASH_ENV", "Payments", "crash_hook_from_env"]

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


# A statement that returns no row: a cap of zero, which no payment fits.
_NEVER: Step = ("SELECT 1 WHERE 1 = 0", ())


def _call_key(req: PaymentRequest) -> str:
    """The idempotency key the call itself names (an INVOICE may supply one instead)."""
    return req.key or (f"id:{req.msg_id}" if req.msg_id else "")


def _blocked(code: str, detail: str = "") -> PaymentDisposition:
    return PaymentDisposition(status="blocked", code=code, reason=f"{code}: {detail}" if detail else code)


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
        """pay | pay_invoice | offer | accept. Never raises for a verdict."""
        checked = check_payment_request(kind, raw)
        if isinstance(checked, Refusal):
            return _blocked(checked.code, checked.detail)
        try:
            # One read: the agent (identity from the token only), its spend policy, the
            # intent already under this key, and its wallet on this chain.
            key = _call_key(checked)
            ctx = await self.store.context(hash_token(token), checked.chain, key) if token else None
            if ctx is None:
                return _blocked("unknown_agent")
            if ctx.agent.killed:
                return _blocked("killed")
            return await self._decide(ctx, checked)
        except StoreError as exc:
            return PaymentDisposition(status="failed", code="store_error", reason=f"store error: {exc}")

    async def _decide(self, ctx: Context, req: PaymentRequest) -> PaymentDisposition:
        agent, policy = ctx.agent, ctx.policy
        invoice_key: str | None = None
        if req.kind == "pay_invoice" or (req.kind == "pay" and req.invoice):
            bound = await self._bind(agent, req)
            if isinstance(bound, PaymentDisposition):
                return bound
            req, invoice_key = bound
        route = check_route(req, policy, invoice_bound=invoice_key is not None)
        if route is not None:
            return _blocked(route.code, route.detail)
        key = req.key or (invoice_key or "") or (f"id:{req.msg_id}" if req.msg_id else "")
        if not key:
            return _blocked("invalid_request", "idempotency_key (or id) is required")
        if key == _call_key(req):
            prior = await self.store.get(ctx.prior_id) if ctx.prior_id is not None else None
        else:  # the key came from the INVOICE
            prior = await self.store.by_key(agent.id, key)
            if prior is not None and prior.invoice_key != key:
                # Not a payment of this INVOICE (agents' keys may not take this form now;
                # one recorded by an earlier version must still not answer for it).
                return _blocked("invalid_request", "this INVOICE's key names another payment")
        if prior is not None:  # a retried call returns the first outcome
            return await self.resume(prior)
        if invoice_key is not None and await self.store.by_invoice(agent.id, invoice_key) is not None:
            return _blocked(ALREADY_PAID, "this INVOICE already has a payment")
        # S1: the asset is known to the rail's registry.
        payer = self.payers.get(req.chain)
        asset = payer.asset(req.token) if payer is not None else None
        if payer is None or asset is None:
            return _blocked("unknown_asset", f"{req.token} on {req.chain} is not a known asset")
        if not payer.valid_address(req.wallet):
            return _blocked("invalid_request", f"wallet is not a {req.chain} address")
        req = replace(req, token=asset.symbol)
        wallet, sealed = ctx.wallet, ctx.sealed
        if wallet is None or wallet.chain != req.chain:  # the chain came from the INVOICE
            wallet, sealed = await self.store.wallet_for(agent.id, req.chain), None
        if wallet is None:
            return _blocked("no_wallet", f"the agent holds no wallet on {req.chain}")
        if req.kind == "offer":
            receive = await self._receive_wallet(agent, req)
            if isinstance(receive, PaymentDisposition):
                return receive
            req = replace(req, receive_wallet=receive)
        # The send checks on the PAY email (with a placeholder proof: the real one exists
        # only after the payment, and the shape is the same).
        msg_id = req.msg_id or f"pay-{self.new_id()[:16]}"
        req = replace(req, msg_id=msg_id)
        mail = None if req.kind == "counter" else self._mail(agent, req, wallet, placeholder=True)
        if mail is not None:
            # From is the agent's own address by construction (the sender pin holds); the
            # send path's content checks still run on the message the call would send.
            checked = check_request(mail)
            if isinstance(checked, Disposition):
                return _blocked("invalid_request", checked.reason)
        hold: Refusal | None = None
        if mail is not None and not allowlisted(req.to, agent.policy.allow):
            hold = Refusal(
                "pending_approval", "recipient_not_allowed", f"{req.to} is not on the mail allowlist"
            )
        hold = hold or check_payee(req, policy) or check_limits(req, policy)  # S2, S3
        steps, taken, refusals = ([], [], []) if hold else self._cap_steps(agent, req, policy)
        intent = Intent(
            id=self.new_id(),
            agent_id=agent.id,
            idem_key=key,
            invoice_key=invoice_key,
            kind=req.kind,
            state="PENDING" if hold else "RESERVED",
            code=hold.code if hold else "",
            reason=hold.reason if hold else "",
            request={"payment": req.to_json(), "mail": mail},
            chain=req.chain,
            token=asset.symbol,
            amount=req.amount,
            decimals=asset.decimals,
            payee=req.to,
            wallet=req.wallet,
            wallet_id=wallet.id,
            invoice_ref=req.invoice or None,
            message_id=f"<{self.new_id()}@{agent.address.rsplit('@', 1)[1].lower()}>",
            taken=taken,
            tx_id=None,
            tx_blob=None,
            created_at=self.clock(),
            decided_at=None,
            decided_by=None,
            agent_name=agent.name,
        )
        if hold is None:
            # The mail caps, then S4 (hourly, then daily spend cap), and the RESERVED intent:
            # one transaction, so a refused cap or a concurrent call with this key leaves
            # every counter as it was (nothing to hand back).
            batch = await self.store.reserve(steps, intent, self.clock())
            if batch.committed:
                self.crash("after_intent")
                # The intent as just inserted: nothing else can have moved it (its key is new).
                return await run(self, intent.id, live=True, agent=agent, intent=intent, sealed=sealed)
            assert batch.refused_at is not None
            if batch.refused_at == len(steps):  # a concurrent call with this key won
                return await self._winner(agent.id, key)
            hold = refusals[batch.refused_at]
            intent = replace(intent, state="PENDING", code=hold.code, reason=hold.reason, taken=[])
        if not await self.store.insert_intent(intent, self.clock()):
            return await self._winner(agent.id, key)
        return self.disposition(intent)

    async def _winner(self, agent_id: str, key: str) -> PaymentDisposition:
        winner = await self.store.by_key(agent_id, key)
        if winner is None:
            return _blocked(ALREADY_PAID, "this INVOICE already has a payment")
        return await self.resume(winner)

    async def _bind(
        self, agent: Agent, req: PaymentRequest
    ) -> tuple[PaymentRequest, str] | PaymentDisposition:
        if self.invoices is None or self.dns is None:
            return _blocked(NOT_FOUND, "the enforcer reads no inbox for this agent")
        raws = self.invoices.candidates(agent, req.invoice)

        async def sent_orders(order_id: str) -> list[str]:
            rows = await self.store.sent_orders(agent.id, order_id)
            out = []
            for request, _mid in rows:
                body = request.get("body") or {}
                if request.get("type") == "order" and body.get("id") == order_id:
                    out.append(str(request.get("to", "")))
            return out

        async def paid(key: str) -> bool:
            return await self.store.by_invoice(agent.id, key) is not None

        bound = await bind_invoice(
            agent, req.invoice, raws, dns=self.dns, sent_orders=sent_orders, bound=paid,
            payee=req.to if req.kind == "pay_invoice" else "",
        )
        if isinstance(bound, Refusal):
            return _blocked(bound.code, bound.detail)
        if req.kind == "pay":
            given = (req.to.lower(), req.chain, req.token.upper(), req.amount, req.wallet)
            terms = (bound.payee.lower(), bound.chain, bound.token.upper(), bound.amount, bound.wallet)
            if given != terms:
                return _blocked(
                    MISMATCH, "the call's payee, asset, amount or wallet differ from the INVOICE's"
                )
        return replace(
            req,
            to=bound.payee,
            chain=bound.chain,
            token=bound.token,
            amount=bound.amount,
            wallet=bound.wallet,
            invoice=bound.invoice_id,
            reply_to=bound.message_id,
        ), bound.key

    async def _receive_wallet(self, agent: Agent, req: PaymentRequest) -> str | PaymentDisposition:
        """Where the OFFER asks its want leg to be paid: the call's receive_wallet, else the
        agent's own wallet on the want leg's chain (not the give leg's: a Solana address
        cannot receive on Base), checked against that chain's address syntax."""
        chain = str((req.want or {}).get("chain", ""))
        address = req.receive_wallet
        if not address:
            held = await self.store.wallet_for(agent.id, chain)
            if held is None:
                return _blocked("no_wallet", f"the agent holds no wallet on {chain} to receive the want leg "
                                "(create one, or give receive_wallet)")
            address = held.address
        payer = self.payers.get(chain)
        if payer is not None and not payer.valid_address(address):
            return _blocked("invalid_request", f"receive_wallet is not a {chain} address")
        return address

    def _mail(
        self, agent: Agent, req: PaymentRequest, wallet: WalletRecord, *, placeholder: bool
    ) -> dict[str, Any]:
        """The send request of the email leg (PAY, OFFER, ACCEPT or prepaid ORDER), built
        from protocol.messages — the models every sender composes — with a placeholder
        proof: payments_exec.pay_mail puts the real, bound proof in its place."""
        message = leg_message(req, wallet.address)
        mail = {"to": req.to, "from": agent.address, "type": message.type,
                "body": json.loads(message_json(message))}
        if req.reply_to:  # the PAY answers the INVOICE it settles: one thread for both sides
            mail["in_reply_to"] = req.reply_to
        return mail

    def _cap_steps(
        self, agent: Agent, req: PaymentRequest, policy: SpendPolicy
    ) -> tuple[list[Step], list[list[Any]], list[Refusal]]:
        """The conditional increments in order — the mail caps (one slot each), then the
        hourly, then the daily spend cap — with what each takes and the refusal if it does
        not fit. A cap of zero is a step that never fits: it holds every payment, and the
        rollback leaves every counter untouched."""
        hour = time.strftime("%Y-%m-%dT%H", time.gmtime(self.clock()))
        day = hour[:10]
        steps: list[Step] = []
        taken: list[list[Any]] = []
        refusals: list[Refusal] = []

        def never(code: str, reason: str) -> tuple[list[Step], list[list[Any]], list[Refusal]]:
            return [*steps, _NEVER], taken, [*refusals, Refusal("pending_approval", code, reason)]

        p = agent.policy
        if req.kind != "counter":  # a counter-leg's email takes its slots on the send path
            if p.hourly_cap <= 0 or p.daily_cap <= 0:
                return never("mail_cap_zero", "the agent's mail cap is zero")
            for win, slot, sends, code, what in (
                ("h", hour, p.hourly_cap, "mail_hourly_cap", "hourly mail cap reached"),
                ("d", day, p.daily_cap, "mail_daily_cap", "daily mail cap reached"),
            ):
                steps.append(self.enforcer.store.step("take_slot", (agent.id, win, slot, sends)))
                taken.append(["mail", win, slot])
                refusals.append(Refusal("pending_approval", code, what))
        key = asset_key(req.chain, req.token)
        limit = policy.limits[key]  # check_limits held a missing entry already
        spend = (("h", hour, limit.hourly, "hourly_cap"), ("d", day, limit.daily, "daily_cap"))
        for win, slot, cap, code in spend:
            if cap is None:
                continue
            what = f"{key} {code.replace('_', ' ')}"
            if cap <= 0:
                return never(f"{code}_zero", f"the {what} is zero")
            steps.append(self.store.spend_step(agent.id, key, win, slot, req.amount, cap))
            taken.append(["spend", key, win, slot, req.amount])
            refusals.append(Refusal("pending_approval", f"{code}_reached", f"{what} reached"))
        return steps, taken, refusals

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

