"""What the worker's console shows, from what the ledger's summaries return (pure: no I/O,
no clock): revenue per day per rail, flows and their messages, jobs, refunds and OOPS as
rows of plain values a template prints. Amounts a person reads carry the asset's decimals
(rails/amounts.py), with the raw units beside them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from envelopay.ledger.jobs import flow_state_text
from envelopay.ledger.store import FlowRecord, LogEntry, RefundLine
from envelopay.ledger.summaries import JobLine, OopsSent
from envelopay.rails.amounts import Decimals, amount_text

__all__ = [
    "Received",
    "flow_row",
    "job_row",
    "message_row",
    "money",
    "oops_row",
    "received_in",
    "revenue_rows",
    "utc",
]


@dataclass(frozen=True, slots=True)
class Received:
    """Money one inbound message brought: the rail said ok and nothing was refused."""

    at: datetime
    chain: str
    token: str
    units: int


def utc(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S")


def money(units: int, chain: str | None, token: str | None, decimals: Decimals) -> dict[str, Any]:
    """An amount as the page prints it: `human` ("0.25 USDC") and the raw `units` beside it
    (None when the decimals are unknown: the human text already is the units)."""
    if chain is None or token is None:
        return {"human": "free" if units == 0 else str(units), "units": None}
    places = decimals(chain, token)
    return {"human": amount_text(units, token, places), "units": units if places is not None else None}


def _digits(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else None


def received_in(entry: LogEntry) -> Received | None:
    """The money of one inbound entry with a verdict: a PAY's, or an OFFER's give leg, when
    the rail said ok and the step was not refused; the amount the rail observed, else the
    amount the message named (as `worker serve`'s log counts it)."""
    verdict, body = entry.verdict or {}, entry.body or {}
    if verdict.get("status") != "ok" or entry.oops is not None or entry.direction != "in":
        return None
    leg = body.get("give") if entry.type == "offer" else body
    if not isinstance(leg, Mapping):
        return None
    chain, token = leg.get("chain"), leg.get("token")
    units = _digits(verdict.get("observed_amount"))
    if units is None:
        named = leg.get("amount")
        units = named if isinstance(named, int) and not isinstance(named, bool) else _digits(named)
    if not isinstance(chain, str) or not isinstance(token, str) or units is None:
        return None
    return Received(entry.at, chain, token, units)


def revenue_rows(
    entries: Iterable[LogEntry], decimals: Decimals, refunds: Iterable[RefundLine] = ()
) -> list[dict[str, Any]]:
    """Money received per UTC day per rail (chain and token), newest day first, and the
    refunds paid back that day on that rail (`refunded`: a failed job's money, an
    overpayment's excess), so money that went back does not read as revenue."""
    sums: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for entry in entries:
        got = received_in(entry)
        if got is not None:
            key = (got.at.strftime("%Y-%m-%d"), got.chain, got.token)
            sums[key][0] += got.units
            sums[key][1] += 1
    for back in refunds:
        sums[(back.updated_at.strftime("%Y-%m-%d"), back.chain, back.token)][2] += back.amount
    rows = []
    for (day, chain, token), (units, count, returned) in sorted(
        sums.items(), key=lambda kv: (kv[0][0], kv[0][1:])
    ):
        shown = money(returned, chain, token, decimals)
        rows.append({"day": day, "chain": chain, "token": token, "payments": count,
                     **money(units, chain, token, decimals),
                     "refunded": shown["human"] if returned else "", "refunded_units": returned})
    rows.sort(key=lambda r: r["day"], reverse=True)  # stable: rails stay in name order within a day
    return rows


def flow_row(flow: FlowRecord, job: str | None = None) -> dict[str, Any]:
    """`job`: the state of the flow's job, None when it has none; `said` is the state as
    `envelopay flows` prints it (`paid · job held`)."""
    return {"id": flow.flow_id, "peer": flow.peer, "kind": flow.kind, "side": flow.side, "state": flow.state,
            "said": flow_state_text(flow.state, job), "created": utc(flow.created_at),
            "updated": utc(flow.updated_at)}


def message_row(entry: LogEntry, decimals: Decimals) -> dict[str, Any]:
    """One line of a flow's log: who wrote what, the rail's verdict and the money it moved."""
    body, verdict = entry.body or {}, entry.verdict or {}
    leg = body.get("give") if entry.type == "offer" else body
    amount = None
    if isinstance(leg, Mapping):
        units = leg.get("amount")
        units = units if isinstance(units, int) and not isinstance(units, bool) else _digits(units)
        chain, token = leg.get("chain"), leg.get("token")
        if units is not None and isinstance(chain, str) and isinstance(token, str):
            amount = money(units, chain, token, decimals) | {"chain": chain}
    task = body.get("task")
    return {
        "seq": entry.seq, "at": utc(entry.at), "direction": entry.direction, "type": entry.type.upper(),
        "sender": entry.sender or "", "recipient": entry.recipient or "", "id": entry.protocol_id or "",
        "oops": entry.oops or "", "verdict": verdict.get("status") or "", "amount": amount,
        "task": task.get("name") if isinstance(task, Mapping) else None,
        "note": body.get("note") if isinstance(body.get("note"), str) else "",
    }


def oops_row(oops: OopsSent) -> dict[str, Any]:
    return {"at": utc(oops.at), "to": oops.recipient, "code": oops.code or "-", "note": oops.note,
            "flow": oops.flow_id, "status": oops.status}


def job_row(job: JobLine, decimals: Decimals) -> dict[str, Any]:
    refund = job.refund or {}
    refunded = _digits(str(refund.get("amount", ""))) if isinstance(refund, Mapping) else None
    return {"id": job.job_id, "flow": job.flow_id, "peer": job.peer, "task": job.task, "state": job.state,
            "paid": money(job.amount, job.chain, job.token, decimals), "error": job.error or "",
            "refund": None if refunded is None else money(refunded, job.chain, job.token, decimals),
            "updated": utc(job.updated_at)}
