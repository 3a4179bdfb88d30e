"""What a client command tells its caller: one JSON document and one exit code.

The document (schemas/cli-output.schema.json, `$defs/client`) says what was sent, whether
the mail left, waits in the outbox or was refused for good, what was paid (so a person
knows where the money is), the answer that came back, the flow's state and any OOPS
with its code. The exit code follows README "Exit codes":

    0  the flow moved as asked (the mail left; with --wait, a non-OOPS answer came)
    1  the peer answered OOPS, a permanent delivery failure (e.g. 550), or a timeout
    2  bad input: nothing sent and nothing paid
    3  the environment is at fault: a wallet short of funds, the transport or RPC
       unreachable (mail left queued in the outbox), a configuration error
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from envelopay.protocol.compose import message_json
from envelopay.protocol.messages import Accept, Fulfill, Invoice, Message, Offer, Oops, Pay
from envelopay.rails.amounts import Decimals, amount_with_units, no_decimals

if TYPE_CHECKING:
    from envelopay.client.commands import ClientRun

__all__ = ["ENVIRONMENT", "FAILED", "OK", "USAGE", "Report", "client_report", "paid_of"]

OK, FAILED, USAGE, ENVIRONMENT = 0, 1, 2, 3


@dataclass(frozen=True)
class Report:
    """The document, the exit code, and the readable lines of a plain run."""

    document: dict[str, Any]
    code: int
    lines: tuple[str, ...]


def paid_of(message: Message, recipient: str | None = None) -> dict[str, Any] | None:
    """The on-chain payment a sent message carries the proof of (None for the others)."""
    if isinstance(message, (Pay, Accept)):
        return {"chain": message.chain, "token": message.token, "amount": str(message.amount),
                "to": recipient, "proof": dict(message.proof)}
    if isinstance(message, Offer):
        g = message.give
        return {"chain": g.chain, "token": g.token, "amount": str(g.amount), "to": g.to,
                "proof": dict(g.proof)}
    return None


def _wire(message: Message) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(message_json(message))
    return doc


def client_report(
    command: str,
    run: ClientRun,
    *,
    timeout: float,
    overrides: Sequence[str] = (),
    recipient: str | None = None,
    checked: dict[str, Any] | None = None,
    decimals: Decimals = no_decimals,
) -> Report:
    """Classify one client run: its document, exit code and readable lines (amounts in
    them read in the asset's units by `decimals`; the document keeps smallest units)."""
    sent = run.sent
    msg = sent.outbound.message
    delivery = "sent" if run.queued is None else ("failed" if run.failed else "queued")
    doc: dict[str, Any] = {
        "command": command,
        "ok": False,
        "sent": {"type": msg.type, "id": getattr(msg, "id", None), "message_id": sent.message_id,
                 "to": sent.outbound.recipient},
        "delivery": delivery,
        "queued": delivery == "queued",
        "delivery_error": run.queued,
        "paid": paid_of(msg, recipient),
        "overrides": list(overrides),
        "checked": checked,
        "flow": {"id": sent.flow_id, "state": sent.state},
        "answer": None,
        "oops": None,
        "timed_out": False,
        "held": False,
    }
    lines = [f"sent {msg.type.upper()} {sent.message_id} (flow {sent.flow_id}, state {sent.state})"]
    if overrides:
        lines.append(f"overrode the INVOICE's {', '.join(overrides)} (--override)")
    code = OK
    if delivery == "queued":
        lines = [f"queued {msg.type.upper()} {sent.message_id} (flow {sent.flow_id}): not delivered yet "
                 f"({run.queued}); `envelopay drain` sends it"]
        code = ENVIRONMENT
    elif delivery == "failed":
        lines = [f"failed {msg.type.upper()} {sent.message_id} (flow {sent.flow_id}): refused for good "
                 f"({run.queued})"]
        code = FAILED
    elif run.answer is not None:
        code = _answer(doc, lines, run, timeout, decimals)
    paid = doc["paid"]
    if paid is not None:  # paid before the mail went, whatever became of the mail
        money = amount_with_units(int(paid["amount"]), paid["token"], decimals(paid["chain"], paid["token"]))
        lines.insert(1, f"paid {money} on {paid['chain']}" + (f" to {paid['to']}" if paid["to"] else ""))
    doc["ok"] = code == OK
    doc["exit"] = code
    return Report(doc, code, tuple(lines))


def _answer(doc: dict[str, Any], lines: list[str], run: ClientRun, timeout: float, decimals: Decimals) -> int:
    answer = run.answer
    assert answer is not None
    if answer.waits:  # the job's states the worker told on the way (SPEC.md "Status while working")
        doc["states"] = [{"state": w.state, "at": dict(w.at)} for w in answer.waits]
        lines.append("job: " + " → ".join(w.state for w in answer.waits))
    if answer.timed_out:
        doc["timed_out"] = True
        lines.append(f"no answer within {timeout:g} s; see: envelopay show {run.sent.flow_id}")
        return FAILED
    if answer.held:
        doc["held"] = True
        lines.append("the work failed and the worker holds the job for its operator, who refunds or "
                     "retries it: no answer comes until then; see: envelopay status "
                     f"{run.sent.flow_id} (asks the worker), envelopay show {run.sent.flow_id}")
        return FAILED
    out = answer.outcome
    assert out is not None
    doc["flow"] = {"id": out.flow_id, "state": out.state}
    message = answer.message
    kind = message.type.upper() if message is not None else "?"
    lines.append(f"received {kind} (flow {out.flow_id}, state {out.state})")
    if message is None:
        return FAILED
    if isinstance(message, Invoice):
        asked = amount_with_units(message.amount, message.token, decimals(message.chain, message.token))
        lines.append(f"the INVOICE asks {asked} on {message.chain}")
    doc["answer"] = _wire(message)
    if isinstance(message, Oops):
        doc["oops"] = {"code": message.error.code if message.error else None, "note": message.note,
                       "ref": message.ref}
        lines.append(json.dumps(doc["answer"], indent=2, ensure_ascii=False))
        if doc["paid"] is not None and out.state == "refunded":
            # The payment was taken and the work failed: the money came back (checked on the
            # chain, as `show` lists it) — not a payment refused (seen on a new-user walk).
            code = doc["oops"]["code"]
            why = ("the OFFER was refused" if doc["sent"]["type"] == "offer" else
                   "the work failed" if code in (None, "task_failed") else f"the worker answered {code}")
            lines.append(f"{why} and the payment above was refunded: see envelopay show {out.flow_id}")
        elif doc["paid"] is not None:
            lines.append(f"the payment above was refused; the flow is back to {out.state}: "
                         f"see envelopay show {out.flow_id}")
        return FAILED
    lines.append(json.dumps(doc["answer"], indent=2, ensure_ascii=False))
    back = message.refund if isinstance(message, Fulfill) else None
    if isinstance(back, dict) and str(back.get("amount", "")).isdigit():
        # An overpayment's excess paid back (SPEC.md "Refunds"): say why money arrives.
        chain, token = str(back.get("chain")), str(back.get("token"))
        money = amount_with_units(int(back["amount"]), token, decimals(chain, token))
        lines.append(f"the worker says {money} of the payment came back on {chain} ({back.get('reason')}); "
                     f"checked on the chain: see envelopay show {out.flow_id}")
    return OK
