"""`envelopay approvals show ID` as a person reads it: the same content as the console's
detail page (enforcer/service/approval_view.py), one labelled line per field, the body last."""

from __future__ import annotations

from typing import Any

__all__ = ["approval_lines"]


def _field(label: str, value: Any) -> list[str]:
    return [f"{label:<12} {value}"] if value not in (None, "", []) else []


def _mail(c: dict[str, Any]) -> list[str]:
    lines = _field("from", c.get("from")) + _field("to", c.get("to")) + _field("subject", c.get("subject"))
    lines += _field("in reply to", c.get("in_reply_to")) + _field("note", c.get("note"))
    for a in c.get("attachments") or []:
        lines += _field("attachment", f"{a['name']} ({a['content_type']}, {a['size']} bytes)")
    lines += _field("problem", c.get("problem"))
    return [*lines, "", c.get("text") or "(no text body)"]


def _payment(v: dict[str, Any]) -> list[str]:
    c, bal = v["content"], v.get("balance") or {}
    lines = _field("amount", f"{c['amount_text']} on {c['chain']} ({c['operation']})")
    lines += _field("payee", c.get("payee")) + _field("wallet", c.get("wallet"))
    if c.get("invoice"):
        lines += _field("invoice", f"{c['invoice']['ref']} · DKIM {c['invoice']['dkim']}")
    if "error" in bal:
        lines += _field("balance", f"unknown: {bal['error']}")
    else:
        short = bal.get("shortfall")
        lines += _field("balance", bal.get("human", "") + (f" — SHORT by {short['human']}" if short else ""))
    limit = (v.get("policy") or {}).get("limit")
    lines += _field("policy", " · ".join(f"{k} {x['human']}" for k, x in limit.items()) if limit
                    else "no limit set (every payment is held)")
    for cap in v.get("caps") or []:
        left = cap["remaining_human"] + ("" if cap["fits"] else " (too little)")
        lines += _field(f"left {cap['window']}", left)
    return lines


def approval_lines(v: dict[str, Any]) -> list[str]:
    kind, agent, reason = v.get("kind", "mail"), v.get("agent", ""), v.get("reason", "")
    head = [f"{v['id']}  {v['state']}  {kind} of {agent}: {reason}"]
    body = _payment(v) if v.get("kind") == "payment" else _mail(v.get("content") or {})
    return [*head, *_field("hash", v.get("content_hash")), *body]
