"""Checks a client command makes before any money moves (issue 15, "never pay into a
dead end"): the terms of an INVOICE we pay, what a peer said it accepts before we
OFFER, the OOPS codes we may send, and the --timeout we wait. Each refusal is a
UsageError naming the option, raised while nothing is paid or sent."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.config import WorkerConfig
from envelopay.errors import UsageError
from envelopay.protocol.codes import OopsCode

if TYPE_CHECKING:
    from envelopay.ledger.store import FlowRecord, Store

__all__ = ["FRESH", "PayTerms", "accepts_pair", "check_timeout", "exchange_query", "fresh_methods",
           "invoice_terms", "oops_code", "sendable_override"]

FRESH = timedelta(minutes=10)  # how old a METHODS on record may be and still count


@dataclass(frozen=True)
class PayTerms:
    """What `pay --invoice` pays: the INVOICE's terms, or the flags that --override them."""

    amount: str
    token: str
    chain: str
    wallet: str | None  # None: `pay` refuses (--wallet) before paying
    overrides: tuple[str, ...] = ()


def _open(cfg: WorkerConfig) -> Store:
    from envelopay.node.agent_node import open_store  # lazy: keeps cryptography off this module's import

    return open_store(cfg.agent.ledger, Path(cfg.base_dir))


def invoice_terms(
    cfg: WorkerConfig, peer: str, invoice: str, *, amount: str | None, token: str | None, chain: str | None,
    wallet: str | None, override: bool,
) -> PayTerms:
    """The INVOICE `invoice` from `peer` as we recorded it; a flag that contradicts it is
    refused (naming the flag and what the INVOICE asks) unless `override`."""
    store = _open(cfg)
    try:
        rec = store.flow_for_ref(cfg.agent.address, peer, peer, invoice)
    finally:
        store.close()
    body = rec.data.get("invoice") if rec is not None else None
    if rec is None or not isinstance(body, dict):
        raise UsageError(f"--invoice: no INVOICE {invoice!r} from {peer} in this ledger "
                         "(see `envelopay flows`)")
    if rec.state != "invoiced":
        raise UsageError(f"--invoice: INVOICE {invoice!r} is not open: its flow {rec.flow_id} is {rec.state}")
    asked = {"amount": str(body["amount"]), "token": str(body["token"]), "chain": str(body["chain"]),
             "wallet": str(body["wallet"])}
    given = {"amount": amount, "token": token, "chain": chain, "wallet": wallet}
    terms = dict(asked)
    overrides: list[str] = []
    for name, value in given.items():
        same = value is not None and value.lower() == asked[name].lower()
        if value is None or value == asked[name] or (name == "token" and same):
            continue
        if not override:
            raise UsageError(f"--{name}: INVOICE {invoice} asks for {name} {asked[name]}, not {value}; "
                             f"leave --{name} out to pay the INVOICE, or give --override")
        terms[name] = value
        overrides.append(name)
    sendable_override(invoice, asked, terms)
    return PayTerms(terms["amount"], terms["token"], terms["chain"], terms["wallet"], tuple(overrides))


def sendable_override(invoice: str, asked: dict[str, str], terms: dict[str, str]) -> None:
    """Refuse, before anything moves, an override our own flow could never send as the
    PAY of this INVOICE: the order flow takes a PAY on the INVOICE's chain and token, for
    at least its amount (flows/core.py, INVOICE_TERMS). Paid first and refused after, the
    money would be gone with no PAY and no record. Another wallet, or more, may be paid."""
    if terms["chain"] != asked["chain"]:
        raise UsageError(f"--chain: INVOICE {invoice} asks for chain {asked['chain']}; a PAY on "
                         f"{terms['chain']} cannot answer it, even with --override (nothing paid)")
    if terms["token"] != asked["token"]:
        raise UsageError(f"--token: INVOICE {invoice} asks for token {asked['token']}; a PAY in "
                         f"{terms['token']} cannot answer it, even with --override (nothing paid)")
    if terms["amount"].isdigit() and int(terms["amount"]) < int(asked["amount"]):
        raise UsageError(f"--amount: INVOICE {invoice} asks for amount {asked['amount']}; a PAY of less "
                         f"({terms['amount']}) cannot answer it, even with --override (nothing paid)")


def exchange_query(give: str, want: str) -> dict[str, Any]:
    """The WHICH task that asks a worker whether it trades `give` for `want` ("chain/token")."""
    return {"exchange": {"give": give, "want": want}}


def accepts_pair(methods: Any, give: str, want: str) -> dict[str, Any] | None:
    """The rail of a METHODS body that says its sender takes `give` for `want` (SPEC.md
    "Client checks before paying": a rail for the give asset and the note
    `exchange GIVE for WANT`), else None."""
    if not isinstance(methods, dict):
        return None
    note = str(methods.get("note") or "").lower()
    if not note.startswith(f"exchange {give} for {want}".lower()):
        return None
    chain, _, token = give.partition("/")
    for rail in methods.get("rails") or ():
        if not isinstance(rail, dict):
            continue
        if rail.get("chain") == chain and str(rail.get("token")).lower() == token.lower():
            return rail
    return None


def fresh_methods(
    store: Store, local: str, peer: str, give: str, want: str, now: datetime | None = None
) -> FlowRecord | None:
    """A METHODS from `peer` on record, younger than FRESH, that accepts the pair."""
    now = now or datetime.now(UTC)
    for rec in store.list_flows(local, 200):
        if rec.peer != peer or now - rec.updated_at > FRESH:
            continue
        if accepts_pair(rec.data.get("methods"), give, want) is not None:
            return rec
    return None


def oops_code(code: str) -> str:
    """--code: one of the OOPS codes SPEC.md lists (the spec's six and our extensions)."""
    known = {c.value for c in OopsCode}
    if code not in known:
        raise UsageError(f"--code: {code!r} is not an OOPS code; one of: {', '.join(sorted(known))}")
    return code


MAX_TIMEOUT = 86_400.0  # a day: past it a wait is no wait, and 1e308 s overflowed the event loop


def check_timeout(timeout: float) -> float:
    """--timeout: a positive number of seconds, at most a day."""
    if not math.isfinite(timeout) or timeout <= 0:
        raise UsageError(f"--timeout: must be a positive number of seconds, not {timeout:g}")
    if timeout > MAX_TIMEOUT:
        raise UsageError(f"--timeout: at most {MAX_TIMEOUT:,.0f} seconds (a day), not {timeout:g}")
    return timeout
