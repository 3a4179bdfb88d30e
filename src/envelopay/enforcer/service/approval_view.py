"""What an operator approves, exactly: one approval's content as the console, the API
(`GET /v1/approvals[/{id}]`) and `envelopay approvals show` present it, and the hash that
binds a decision to it.

A held mail is shown as the enforcer would compose it now (the same `compose_request`
that execute runs): from, to, subject, the text body, each attachment's name and size, the
thread it answers, the agent's note. A held payment is shown with its amount in human and
raw units, payee and wallet, the INVOICE it settles, the agent's balance on that rail (and
the shortfall when short) and the spend policy with what remains of today's caps.

`content_hash` covers what would leave and the policy it is judged by, never the advisory
parts (balances, remaining caps, state): a decision that carries a hash that no longer
matches is refused (409 `content_changed`) and nothing moves.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy as email_policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.mime import compose_request
from envelopay.enforcer.send.model import Decision, QueueRow
from envelopay.enforcer.spend.intent import Intent
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy, asset_key
from envelopay.rails.amounts import amount_with_units, human_amount

__all__ = [
    "CONTENT_CHANGED", "Balances", "Binding", "approval_view", "bind_decision", "content_hash", "mail_view",
    "payment_view",
]

CONTENT_CHANGED = "content_changed"
_PREVIEW_ID = "<preview@envelopay.invalid>"  # execute assigns the real one


def content_hash(bound: dict[str, Any]) -> str:
    """sha256 over canonical JSON (sorted keys, no spaces): stable across processes."""
    text = json.dumps(bound, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


# -- held mail ---------------------------------------------------------------------------


def _parts(msg: EmailMessage) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """(the text/plain body, the attachments [{name, size, content_type}], the other inline
    parts — an HTML rendering of the same text — as [{size, content_type}])."""
    text: str | None = None
    attachments: list[dict[str, Any]] = []
    inline: list[dict[str, Any]] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        payload = part.get_payload(decode=True)
        size = len(payload) if isinstance(payload, bytes) else 0
        name = part.get_filename()
        if name is not None or part.is_attachment():
            attachments.append({"name": name or "(unnamed)", "size": size,
                                "content_type": part.get_content_type()})
        elif text is None and part.get_content_type() == "text/plain":
            text = str(part.get_content())
        else:
            inline.append({"size": size, "content_type": part.get_content_type()})
    text = (text or "").replace("\r\n", "\n")
    # compose ends the body with one line end of its own; the agent's text is what is shown.
    return text.removesuffix("\n"), attachments, inline


def _note(body: dict[str, Any] | None) -> str | None:
    note = body.get("note") if isinstance(body, dict) else None
    return note if isinstance(note, str) else None


def _mail_content(row: QueueRow, agent_name: str, now: float) -> dict[str, Any]:
    req = row.request
    base: dict[str, Any] = {
        "from": req.sender, "to": req.to, "in_reply_to": req.in_reply_to,
        "references": list(req.references), "reply_to": req.reply_to, "type": req.msg_type,
        # A protocol message's note (its body's `note`: free text to the peer); plain
        # mail has none beyond its text.
        "note": _note(req.body) if req.msg_type else None,
    }
    try:
        raw = compose_request(req, message_id=row.message_id or _PREVIEW_ID,
                              date=datetime.fromtimestamp(now, UTC), agent_name=agent_name)
    # The request was validated when queued; if it no longer composes, say so (execute
    # would fail it the same way) rather than show a guess.
    except (ValueError, TypeError, RecursionError, OverflowError) as exc:
        return {**base, "subject": req.subject, "text": req.text, "attachments": [], "inline": [],
                "problem": f"cannot compose: {exc}"[:300]}
    msg = BytesParser(policy=email_policy.default).parsebytes(raw)
    assert isinstance(msg, EmailMessage)
    text, attachments, inline = _parts(msg)
    return {**base, "subject": str(msg.get("Subject", "")), "text": text, "attachments": attachments,
            "inline": inline}


def mail_view(row: QueueRow, *, now: float) -> dict[str, Any]:
    """A queued (or sent) mail: the queue row's fields and what leaves."""
    content = _mail_content(row, row.agent_name, now)
    return {**row.to_json(), "kind": "mail", "subject": content["subject"], "content": content,
            "content_hash": _mail_hash(row)}


def _mail_hash(row: QueueRow) -> str:
    # The id, the agent's name and the request: none of them is ever updated.
    return content_hash({"id": row.id, "agent": row.agent_name, "request": row.request.to_json()})


# -- held payment ------------------------------------------------------------------------


def _limit_json(limit: SpendLimit | None, token: str, decimals: int) -> dict[str, Any] | None:
    if limit is None:
        return None
    out: dict[str, Any] = {}
    for name, value in (("per_payment", limit.per_payment), ("hourly", limit.hourly), ("daily", limit.daily)):
        if value is not None:
            out[name] = {"amount": str(value), "human": amount_with_units(value, token, decimals)}
    return out


async def _caps_left(
    enforcer: Enforcer, payments: Any, i: Intent, limit: SpendLimit | None
) -> list[dict[str, Any]]:
    """Spent and remaining of the hourly and daily spend caps in the current windows
    (the same window slots decide.cap_steps takes)."""
    if limit is None:
        return []
    hour = time.strftime("%Y-%m-%dT%H", time.gmtime(enforcer.clock()))
    key = asset_key(i.chain, i.token)
    out = []
    windows = (("h", hour, limit.hourly, "this hour"), ("d", hour[:10], limit.daily, "today"))
    for win, slot, cap, label in windows:
        if cap is None:
            continue
        spent = await payments.store.spent(i.agent_id, key, win, slot)
        left = max(cap - spent, 0)
        out.append({
            "window": label, "cap": str(cap), "spent": str(spent), "remaining": str(left),
            "remaining_human": amount_with_units(left, i.token, i.decimals),
            "fits": i.amount <= left,
        })
    return out


Balances = dict[str, dict[str, Any]]  # agent id → Payments.balances_of: one rail call per agent


async def _balance(payments: Any, i: Intent, seen: Balances) -> dict[str, Any]:
    """The paying wallet's balance of the asset, and the shortfall when it is below the
    amount. A rail fault is shown as such (balances are advisory)."""
    report = seen.get(i.agent_id)
    if report is None:
        agent = await payments.enforcer.store.agent_by_id(i.agent_id)
        if agent is None:
            return {"error": "no such agent"}
        report = seen[i.agent_id] = await payments.balances_of(agent)
    wallet = next((w for w in report["wallets"] if w.get("id") == i.wallet_id), None)
    if wallet is None:
        return {"error": "the paying wallet is gone"}
    if "error" in wallet:
        return {"address": wallet.get("address"), "error": wallet["error"]}
    held = wallet.get("balances", {}).get(i.token)
    have = int(held["amount"]) if held else 0
    out: dict[str, Any] = {
        "address": wallet.get("address"), "amount": str(have),
        "human": amount_with_units(have, i.token, i.decimals),
    }
    if have < i.amount:
        short = i.amount - have
        out["shortfall"] = {"amount": str(short), "human": amount_with_units(short, i.token, i.decimals)}
    return out


async def payment_view(
    enforcer: Enforcer, payments: Any, i: Intent, seen: Balances | None = None
) -> dict[str, Any]:
    """A held (or decided) payment: the queue row's fields and what the operator judges.
    Balance and caps are looked up for a PENDING payment only: they inform a decision,
    and a decided payment's wallet has moved on (it would read as short once paid).
    `seen` shares one balance lookup per agent across a page."""
    pending = i.state == "PENDING"
    policy = await payments.store.policy(i.agent_id)
    limit = policy.limits.get(asset_key(i.chain, i.token))
    shown_policy, bound = _payment_bound(i, policy)
    mail = i.request.get("mail") if isinstance(i.request, dict) else None
    content: dict[str, Any] = {
        "operation": i.kind, "amount": str(i.amount), "decimals": i.decimals,
        "amount_human": f"{human_amount(i.amount, i.decimals)} {i.token}",
        "amount_text": amount_with_units(i.amount, i.token, i.decimals),
        "chain": i.chain, "token": i.token, "payee": i.payee, "wallet": i.wallet,
        "mail": ({k: mail.get(k) for k in ("from", "to", "subject", "type", "text", "in_reply_to")}
                 if isinstance(mail, dict) else None),
        # pay_invoice is recorded only for an INVOICE that bound (invoices.bind_invoice):
        # its DKIM passed, aligned with the payee's domain, checked by the enforcer itself.
        "invoice": ({"ref": i.invoice_ref, "dkim": "pass (aligned with the payee's domain, "
                     "verified by the enforcer when the payment was bound)"}
                    if i.invoice_ref else None),
    }
    return {
        **i.to_json(), "content": content, "policy": shown_policy,
        "caps": await _caps_left(enforcer, payments, i, limit) if pending else [],
        "balance": await _balance(payments, i, {} if seen is None else seen) if pending else None,
        "content_hash": content_hash(bound),
    }


def _payment_bound(i: Intent, policy: SpendPolicy) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the policy as shown, what the content hash covers): what would leave and the policy
    it is judged by."""
    limit = policy.limits.get(asset_key(i.chain, i.token))
    shown_policy = {
        "limit": _limit_json(limit, i.token, i.decimals), "payees": list(policy.payees),
        "wallets": list(policy.wallets), "require_invoice": policy.require_invoice,
    }
    bound = {"id": i.id, "agent": i.agent_name, "request": i.request, "amount": str(i.amount),
             "chain": i.chain, "token": i.token, "payee": i.payee, "wallet": i.wallet,
             "invoice": i.invoice_ref, "policy": shown_policy}
    return shown_policy, bound


async def approval_view(enforcer: Enforcer, payments: Any, approval_id: str) -> dict[str, Any] | None:
    """One approval (mail or payment) by id; None when there is none."""
    row = await enforcer.store.get_send(approval_id)
    if row is not None:
        return mail_view(row, now=enforcer.clock())
    if payments is not None:
        intent = await payments.store.get(approval_id)
        if intent is not None:
            return await payment_view(enforcer, payments, intent)
    return None


@dataclass(frozen=True, slots=True)
class Binding:
    """A decision bound to the content the operator was shown. `conflict`: refused now,
    nothing decided. `policy`: a held payment's spend policy as stored when its hash
    matched; the approving statement requires it unchanged, so the check and the approval
    see one content (a held mail's hashed fields are never updated)."""

    conflict: Decision | None = None
    policy: str | None = None


async def bind_decision(
    enforcer: Enforcer, payments: Any, approval_id: str, shown_hash: str | None
) -> Binding:
    """Whether `shown_hash` is the approval's content hash now (no hash, or no such
    approval: an unbound decision, which answers MISSING itself)."""
    if shown_hash is None:
        return Binding()
    row = await enforcer.store.get_send(approval_id)
    if row is not None:
        return _bound(shown_hash, _mail_hash(row), row.state)
    intent = await payments.store.get(approval_id) if payments is not None else None
    if intent is None:
        return Binding()
    text = await payments.store.policy_text(intent.agent_id)
    now = content_hash(_payment_bound(intent, payments.store.parse_policy(text))[1])
    return _bound(shown_hash, now, intent.state, policy=text)


def _bound(shown: str, now: str, state: str, policy: str | None = None) -> Binding:
    if secrets.compare_digest(now, shown):
        return Binding(policy=policy)
    return Binding(conflict=Decision(ok=False, state=state, detail=(
        f"{CONTENT_CHANGED}: the approval is not what was shown (shown {shown[:19]}…, "
        f"now {now[:19]}…); nothing was decided — look again")))
