"""The documents and table rows of the reading commands: `flows`, `show`, `outbox`,
`drain` (schemas/cli-output.schema.json). Pure: records in, plain data out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from envelopay.flows.core import payee_wallet
from envelopay.ledger.jobs import flow_state_text
from envelopay.rails.amounts import Decimals, human_amount, no_decimals

if TYPE_CHECKING:
    from envelopay.engine.outbox import DrainReport
    from envelopay.ledger.store import FlowRecord, LogEntry, OutboxRow

__all__ = ["amount_cell", "drain_doc", "flow_doc", "flows_doc", "flows_rows", "money_rows", "outbox_doc",
           "outbox_rows", "show_doc", "show_rows", "state_cell", "verdict_text"]

FLOW_COLUMNS = ("flow", "state", "kind", "side", "peer", "updated")
SHOW_COLUMNS = ("at", "dir", "type", "id", "proof verdict", "oops", "Message-ID")
MONEY_COLUMNS = ("payment", "chain", "token", "amount", "to", "proof", "status")
OUTBOX_COLUMNS = ("Message-ID", "flow", "to", "type", "status", "attempts", "next attempt", "last error")


def _at(value: Any) -> str | None:
    return value.isoformat(timespec="seconds") if value is not None else None


def flow_doc(f: FlowRecord, job: str | None = None) -> dict[str, Any]:
    """`job`: the state of the flow's job (a worker's order), None when it has none."""
    return {"id": f.flow_id, "state": f.state, "kind": f.kind, "side": f.side, "peer": f.peer,
            "updated": _at(f.updated_at), "job": job}


def flows_doc(address: str, records: Iterable[FlowRecord], next_token: str | None = None,
              jobs: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One page of flows; `next` is the --after token of the next page (None: the last);
    `jobs` maps a flow id to its job's state."""
    jobs = jobs or {}
    return {"command": "flows", "ok": True, "exit": 0, "address": address,
            "flows": [flow_doc(f, jobs.get(f.flow_id)) for f in records], "next": next_token}


def state_cell(state: str, job: str | None) -> str:
    return flow_state_text(state, job)  # the worker console says it the same way


def flows_rows(records: Iterable[FlowRecord], jobs: Mapping[str, str] | None = None) -> list[tuple[str, ...]]:
    """Ids first, never cut (the table folds instead)."""
    jobs = jobs or {}
    return [(f.flow_id, state_cell(f.state, jobs.get(f.flow_id)), f.kind, f.side, f.peer,
             _at(f.updated_at) or "") for f in records]


def verdict_text(verdict: Mapping[str, Any] | None) -> str:
    if not verdict:
        return ""
    text = str(verdict.get("status"))
    if verdict.get("reason"):
        text += f" ({verdict['reason']})"
    return text


def _payments(rec: FlowRecord) -> list[dict[str, Any]]:
    """Where our money went in this flow: the payment awaiting its answer and the refused ones."""
    out: list[dict[str, Any]] = []
    for p in rec.data.get("refused", ()):
        out.append({**p, "status": f"refused ({p.get('oops')})"})
    current = rec.data.get("payment")
    if isinstance(current, Mapping) and not current.get("to"):
        # A payment recorded before the flow kept its payee: the INVOICE's (OFFER's) wallet.
        current = {**current, "to": payee_wallet(str(current.get("message")), rec.data)}
    if isinstance(current, Mapping):
        # A lone PAY or an INVOICE's PAY has no answer when it settles (only an OOPS if not);
        # an ORDER's PAY waits for its FULFILL, an OFFER for its ACCEPT.
        done = rec.state in ("fulfilled", "accepted") or rec.kind in ("pay", "invoice")
        out.append({**current, "status": "paid" if done else "awaiting answer"})
    refund = rec.data.get("refund")
    if isinstance(refund, Mapping):
        # Money that came back (SPEC.md "Refunds"): to our wallet, checked on the rail or not.
        checked = "verified" if refund.get("verified") else "NOT verified"
        checked = checked if rec.side == "payer" else "sent"
        out.append({"message": "refund", "id": str(refund.get("reason") or ""), "chain": refund.get("chain"),
                    "token": refund.get("token"), "amount": refund.get("amount"), "to": refund.get("wallet"),
                    "proof": refund.get("proof"), "status": f"refunded ({checked})"})
    excess = rec.data.get("excess")
    if isinstance(excess, Mapping):
        # An overpayment's excess the FULFILL says went back: "0.05 USDC came back: overpaid".
        checked = "verified" if excess.get("verified") else "NOT verified"
        out.append({"message": "refund", "id": str(excess.get("reason") or ""), "chain": excess.get("chain"),
                    "token": excess.get("token"), "amount": excess.get("amount"), "to": excess.get("wallet"),
                    "proof": excess.get("proof"), "status": f"came back: {excess.get('reason')} ({checked})"})
    return out


def show_doc(rec: FlowRecord, log: Sequence[LogEntry], job: str | None = None) -> dict[str, Any]:
    return {
        "command": "show", "ok": True, "exit": 0, "flow": flow_doc(rec, job),
        "messages": [{"at": _at(e.at), "direction": e.direction, "type": e.type, "id": e.protocol_id,
                      "message_id": e.message_id, "verdict": dict(e.verdict) if e.verdict else None,
                      "oops": e.oops, "body": dict(e.body) if e.body is not None else None} for e in log],
        "payments": _payments(rec),
    }


def show_rows(log: Sequence[LogEntry]) -> list[tuple[str, ...]]:
    return [(_at(e.at) or "", e.direction, e.type.upper(), e.protocol_id or "", verdict_text(e.verdict),
             _oops_of(e), e.message_id or "") for e in log]


def _oops_of(e: LogEntry) -> str:
    if e.oops:
        return e.oops
    if e.type == "oops" and isinstance(e.body, Mapping):
        err = e.body.get("error")
        return str(err.get("code")) if isinstance(err, Mapping) else "oops"
    return ""


def money_rows(rec: FlowRecord, decimals: Decimals = no_decimals) -> list[tuple[str, ...]]:
    """Where the money is; each amount as a person reads it, the raw units beside it."""
    rows: list[tuple[str, ...]] = []
    for p in _payments(rec):
        chain, token = str(p.get("chain")), str(p.get("token"))
        rows.append((f"{str(p.get('message', '')).upper()} {p.get('id', '')}", chain, token,
                     amount_cell(p.get("amount"), decimals(chain, token)), str(p.get("to") or ""),
                     _proof_text(p.get("proof")), str(p["status"])))
    return rows


def amount_cell(amount: Any, decimals: int | None) -> str:
    """`0.25 (250000 units)` with the asset's decimals known, else the units as recorded."""
    text = str(amount)
    if not (text.isascii() and text.isdigit()):
        return text  # not a recorded amount: shown as it is
    if decimals is None:
        return f"{text} units"
    return f"{human_amount(int(text), decimals)} ({text} units)"


def _proof_text(proof: Any) -> str:
    if isinstance(proof, Mapping):
        return ", ".join(f"{k}={v}" for k, v in proof.items())
    return str(proof or "")


def _row_doc(r: OutboxRow) -> dict[str, Any]:
    out = r.outbound
    return {"message_id": out.message_id, "flow": r.flow_id, "to": out.recipient, "type": out.message.type,
            "status": r.status, "attempts": r.attempts, "next_attempt": _at(r.next_attempt),
            "last_error": r.last_error}


def outbox_doc(rows: Iterable[OutboxRow]) -> dict[str, Any]:
    return {"command": "outbox", "ok": True, "exit": 0, "queued": [_row_doc(r) for r in rows]}


def outbox_rows(rows: Iterable[OutboxRow]) -> list[tuple[str, ...]]:
    return [(r.outbound.message_id, r.flow_id or "", r.outbound.recipient, r.outbound.message.type.upper(),
             r.status, str(r.attempts), _at(r.next_attempt) or "", r.last_error or "") for r in rows]


def drain_doc(report: DrainReport) -> dict[str, Any]:
    ok = not report.failed and not report.retry
    return {"command": "drain", "ok": ok, "exit": 0 if ok else (1 if report.failed else 3),
            "sent": list(report.sent), "held": list(report.held), "retry": list(report.retry),
            "failed": list(report.failed)}
