"""What one payment call decides, in order: the INVOICE bound (pay_invoice), the route, the
idempotency key and a prior outcome under it, S1 (the asset), the wallets, the send checks
on the email leg, S2/S3 (payee, limits) and S4 (the caps, taken with the intent in one
transaction). `decide` returns the disposition; a RESERVED intent runs on at once
(payments_exec.run)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from typing import Any

from envelopay.enforcer.common.batch import Step
from envelopay.enforcer.send.model import Agent, Disposition
from envelopay.enforcer.send.policy import allowlisted, check_request
from envelopay.enforcer.spend.intent import Context, Intent
from envelopay.enforcer.spend.invoices import ALREADY_PAID, MISMATCH, NOT_FOUND, bind_invoice
from envelopay.enforcer.spend.legs import leg_message
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.enforcer.spend.parts import PaymentParts
from envelopay.enforcer.spend.payments_exec import run
from envelopay.enforcer.spend.policy import (
    PaymentRequest,
    Refusal,
    SpendPolicy,
    asset_key,
    check_limits,
    check_payee,
    check_route,
)
from envelopay.enforcer.spend.vault import WalletRecord
from envelopay.protocol.compose import message_json
from envelopay.rails.interface import AssetInfo

__all__ = ["blocked", "call_key", "decide"]

# A step that never returns a row: a cap of zero refuses every payment through it.
_NEVER: Step = ("SELECT 1 WHERE 1 = 0", ())

_Caps = tuple[list[Step], list[list[Any]], list[Refusal]]


def call_key(req: PaymentRequest) -> str:
    """The idempotency key the call itself names (an INVOICE may supply one instead)."""
    return req.key or (f"id:{req.msg_id}" if req.msg_id else "")


def blocked(code: str, detail: str = "") -> PaymentDisposition:
    return PaymentDisposition(status="blocked", code=code, reason=f"{code}: {detail}" if detail else code)


@dataclass(frozen=True, slots=True)
class _Ready:
    """A call past S1 and the send checks: what the intent is made of."""

    req: PaymentRequest
    asset: AssetInfo
    wallet: WalletRecord
    sealed: bytes | None
    mail: dict[str, Any] | None


async def decide(p: PaymentParts, ctx: Context, req: PaymentRequest) -> PaymentDisposition:
    agent, policy = ctx.agent, ctx.policy
    invoice_key: str | None = None
    if req.kind == "pay_invoice" or (req.kind == "pay" and req.invoice):
        bound = await _bind(p, agent, req)
        if isinstance(bound, PaymentDisposition):
            return bound
        req, invoice_key = bound
    route = check_route(req, policy, invoice_bound=invoice_key is not None)
    if route is not None:
        return blocked(route.code, route.detail)
    key = req.key or (invoice_key or "") or (f"id:{req.msg_id}" if req.msg_id else "")
    if not key:
        return blocked("invalid_request", "idempotency_key (or id) is required")
    answered = await _prior(p, ctx, req, key, invoice_key)
    if answered is not None:
        return answered
    ready = await _ready(p, ctx, req)
    if isinstance(ready, PaymentDisposition):
        return ready
    req = ready.req
    hold: Refusal | None = None
    if ready.mail is not None and not allowlisted(req.to, agent.policy.allow):
        hold = Refusal("pending_approval", "recipient_not_allowed", f"{req.to} is not on the mail allowlist")
    hold = hold or check_payee(req, policy) or check_limits(req, policy)  # S2, S3
    caps: _Caps = ([], [], []) if hold else cap_steps(p, agent, req, policy)
    intent = _intent(p, agent, ready, key, invoice_key, hold, caps[1])
    return await _record(p, agent, intent, caps, ready.sealed)


async def _prior(
    p: PaymentParts, ctx: Context, req: PaymentRequest, key: str, invoice_key: str | None
) -> PaymentDisposition | None:
    """The first outcome of a retried call, or a refusal of a second payment of the INVOICE."""
    if key == call_key(req):
        prior = await p.store.get(ctx.prior_id) if ctx.prior_id is not None else None
    else:  # the key came from the INVOICE
        prior = await p.store.by_key(ctx.agent.id, key)
        if prior is not None and prior.invoice_key != key:
            # Not a payment of this INVOICE (agents' keys may not take this form now;
            # one recorded by an earlier version must still not answer for it).
            return blocked("invalid_request", "this INVOICE's key names another payment")
    if prior is not None:  # a retried call returns the first outcome
        return await p.resume(prior)
    if invoice_key is not None and await p.store.by_invoice(ctx.agent.id, invoice_key) is not None:
        return blocked(ALREADY_PAID, "this INVOICE already has a payment")
    return None


async def _ready(p: PaymentParts, ctx: Context, req: PaymentRequest) -> _Ready | PaymentDisposition:
    """S1 (the asset is known to the rail's registry), the agent's wallets, and the send
    checks on the email leg the call would send."""
    agent = ctx.agent
    payer = p.payers.get(req.chain)
    asset = payer.asset(req.token) if payer is not None else None
    if payer is None or asset is None:
        return blocked("unknown_asset", f"{req.token} on {req.chain} is not a known asset")
    if not payer.valid_address(req.wallet):
        return blocked("invalid_request", f"wallet is not a {req.chain} address")
    req = replace(req, token=asset.symbol)
    wallet, sealed = ctx.wallet, ctx.sealed
    if wallet is None or wallet.chain != req.chain:  # the chain came from the INVOICE
        wallet, sealed = await p.store.wallet_for(agent.id, req.chain), None
    if wallet is None:
        return blocked("no_wallet", f"the agent holds no wallet on {req.chain}")
    if req.kind == "offer":
        receive = await _receive_wallet(p, agent, req)
        if isinstance(receive, PaymentDisposition):
            return receive
        req = replace(req, receive_wallet=receive)
    # The send checks on the PAY email (with a placeholder proof: the real one exists
    # only after the payment, and the shape is the same).
    req = replace(req, msg_id=req.msg_id or f"pay-{p.new_id()[:16]}")
    mail = None if req.kind == "counter" else leg_mail(agent, req, wallet)
    if mail is not None:
        # From is the agent's own address by construction (the sender pin holds); the
        # send path's content checks still run on the message the call would send.
        checked = check_request(mail)
        if isinstance(checked, Disposition):
            return blocked("invalid_request", checked.reason)
    return _Ready(req, asset, wallet, sealed, mail)


def _intent(
    p: PaymentParts, agent: Agent, ready: _Ready, key: str, invoice_key: str | None, hold: Refusal | None,
    taken: list[list[Any]],
) -> Intent:
    req = ready.req
    return Intent(
        id=p.new_id(), agent_id=agent.id, idem_key=key, invoice_key=invoice_key, kind=req.kind,
        state="PENDING" if hold else "RESERVED", code=hold.code if hold else "",
        reason=hold.reason if hold else "", request={"payment": req.to_json(), "mail": ready.mail},
        chain=req.chain, token=ready.asset.symbol, amount=req.amount, decimals=ready.asset.decimals,
        payee=req.to, wallet=req.wallet, wallet_id=ready.wallet.id, invoice_ref=req.invoice or None,
        message_id=f"<{p.new_id()}@{agent.address.rsplit('@', 1)[1].lower()}>", taken=taken,
        tx_id=None, tx_blob=None, created_at=p.clock(), decided_at=None, decided_by=None,
        agent_name=agent.name,
    )


async def _record(
    p: PaymentParts, agent: Agent, intent: Intent, caps: _Caps, sealed: bytes | None
) -> PaymentDisposition:
    steps, _taken, refusals = caps
    if intent.state == "RESERVED":
        # The mail caps, then S4 (hourly, then daily spend cap), and the RESERVED intent:
        # one transaction, so a refused cap or a concurrent call with this key leaves
        # every counter as it was (nothing to hand back).
        batch = await p.store.reserve(steps, intent, p.clock())
        if batch.committed:
            p.crash("after_intent")
            # The intent as just inserted: nothing else can have moved it (its key is new).
            return await run(p, intent.id, live=True, agent=agent, intent=intent, sealed=sealed)
        assert batch.refused_at is not None
        if batch.refused_at == len(steps):  # a concurrent call with this key won
            return await _winner(p, agent.id, intent.idem_key)
        hold = refusals[batch.refused_at]
        intent = replace(intent, state="PENDING", code=hold.code, reason=hold.reason, taken=[])
    if not await p.store.insert_intent(intent, p.clock()):
        return await _winner(p, agent.id, intent.idem_key)
    return p.disposition(intent)


async def _winner(p: PaymentParts, agent_id: str, key: str) -> PaymentDisposition:
    winner = await p.store.by_key(agent_id, key)
    if winner is None:
        return blocked(ALREADY_PAID, "this INVOICE already has a payment")
    return await p.resume(winner)


async def _bind(
    p: PaymentParts, agent: Agent, req: PaymentRequest
) -> tuple[PaymentRequest, str] | PaymentDisposition:
    if p.invoices is None or p.dns is None:
        return blocked(NOT_FOUND, "the enforcer reads no inbox for this agent")
    raws = p.invoices.candidates(agent, req.invoice)

    async def sent_orders(order_id: str) -> list[str]:
        rows = await p.store.sent_orders(agent.id, order_id)
        out = []
        for request, _mid in rows:
            body = request.get("body") or {}
            if request.get("type") == "order" and body.get("id") == order_id:
                out.append(str(request.get("to", "")))
        return out

    async def paid(key: str) -> bool:
        return await p.store.by_invoice(agent.id, key) is not None

    bound = await bind_invoice(
        agent, req.invoice, raws, dns=p.dns, sent_orders=sent_orders, bound=paid,
        payee=req.to if req.kind == "pay_invoice" else "",
    )
    if isinstance(bound, Refusal):
        return blocked(bound.code, bound.detail)
    if req.kind == "pay":
        given = (req.to.lower(), req.chain, req.token.upper(), req.amount, req.wallet)
        terms = (bound.payee.lower(), bound.chain, bound.token.upper(), bound.amount, bound.wallet)
        if given != terms:
            return blocked(MISMATCH, "the call's payee, asset, amount or wallet differ from the INVOICE's")
    return replace(
        req, to=bound.payee, chain=bound.chain, token=bound.token, amount=bound.amount,
        wallet=bound.wallet, invoice=bound.invoice_id, reply_to=bound.message_id,
    ), bound.key


async def _receive_wallet(p: PaymentParts, agent: Agent, req: PaymentRequest) -> str | PaymentDisposition:
    """Where the OFFER asks its want leg to be paid: the call's receive_wallet, else the
    agent's own wallet on the want leg's chain (not the give leg's: a Solana address
    cannot receive on Base), checked against that chain's address syntax."""
    chain = str((req.want or {}).get("chain", ""))
    address = req.receive_wallet
    if not address:
        held = await p.store.wallet_for(agent.id, chain)
        if held is None:
            return blocked("no_wallet", f"the agent holds no wallet on {chain} to receive the want leg "
                           "(create one, or give receive_wallet)")
        address = held.address
    payer = p.payers.get(chain)
    if payer is not None and not payer.valid_address(address):
        return blocked("invalid_request", f"receive_wallet is not a {chain} address")
    return address


def leg_mail(agent: Agent, req: PaymentRequest, wallet: WalletRecord) -> dict[str, Any]:
    """The send request of the email leg (PAY, OFFER, ACCEPT or prepaid ORDER), built
    from protocol.messages — the models every sender composes — with a placeholder
    proof: payments_exec.pay_mail puts the real, bound proof in its place."""
    message = leg_message(req, wallet.address)
    mail = {"to": req.to, "from": agent.address, "type": message.type,
            "body": json.loads(message_json(message))}
    if req.reply_to:  # the PAY answers the INVOICE it settles: one thread for both sides
        mail["in_reply_to"] = req.reply_to
    return mail


def cap_steps(p: PaymentParts, agent: Agent, req: PaymentRequest, policy: SpendPolicy) -> _Caps:
    """The conditional increments in order — the mail caps (one slot each), then the
    hourly, then the daily spend cap — with what each takes and the refusal if it does
    not fit. A cap of zero is a step that never fits: it holds every payment, and the
    rollback leaves every counter untouched."""
    hour = time.strftime("%Y-%m-%dT%H", time.gmtime(p.clock()))
    day = hour[:10]
    steps: list[Step] = []
    taken: list[list[Any]] = []
    refusals: list[Refusal] = []

    def never(code: str, reason: str) -> _Caps:
        return [*steps, _NEVER], taken, [*refusals, Refusal("pending_approval", code, reason)]

    mail = agent.policy
    if req.kind != "counter":  # a counter-leg's email takes its slots on the send path
        if mail.hourly_cap <= 0 or mail.daily_cap <= 0:
            return never("mail_cap_zero", "the agent's mail cap is zero")
        for win, slot, sends, code, what in (
            ("h", hour, mail.hourly_cap, "mail_hourly_cap", "hourly mail cap reached"),
            ("d", day, mail.daily_cap, "mail_daily_cap", "daily mail cap reached"),
        ):
            steps.append(p.enforcer.store.step("take_slot", (agent.id, win, slot, sends)))
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
        steps.append(p.store.spend_step(agent.id, key, win, slot, req.amount, cap))
        taken.append(["spend", key, win, slot, req.amount])
        refusals.append(Refusal("pending_approval", f"{code}_reached", f"{what} reached"))
    return steps, taken, refusals
