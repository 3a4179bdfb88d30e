"""The machinery every flow shares: the row shape of a transition table and `step`.

A flow is a conversation between us and one peer. Each flow module declares its
`TRANSITIONS` table as data: (state, event, direction, side) → (new state, actions).
`step()` is pure: it takes the flow's state and facts plus one message and returns
a `Step` (new state, new facts, the actions the engine must carry out), or an OOPS
code with the state unchanged. It never raises on remote input.

Actions are of two kinds. *Guards* (ref and terms checks) and *records* (facts kept
for later checks) are evaluated here. The rest (`VERIFY_PROOF`, `DECIDE_*`, `FULFILL`,
`NOTIFY`) are instructions for the engine, in the order listed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Message,
    Methods,
    Offer,
    Oops,
    Order,
    Pay,
    Which,
)

START = "start"

# A message with no row in the table: the documented extension code. OOPS itself always
# has a row (a courtesy we record), so an OOPS is never answered with an OOPS.
ILLEGAL = OopsCode.UNEXPECTED_MESSAGE


class Side(StrEnum):
    PAYER = "payer"  # the one who asks, orders, pays or offers first
    PAYEE = "payee"  # the one who quotes, invoices, fulfils or accepts


class Direction(StrEnum):
    IN = "in"
    OUT = "out"


# The short names the flow modules' tables are written in.
IN, OUT = Direction.IN, Direction.OUT
PAYER, PAYEE = Side.PAYER, Side.PAYEE


class FlowKind(StrEnum):
    PAY = "pay"
    ORDER = "order"
    INVOICE = "invoice"
    FIRST_CONTACT = "first_contact"
    EXCHANGE = "exchange"
    PREPAID = "prepaid"


class Event(StrEnum):
    """The table's message column: the nine types, with the v0.2 prepaid ORDER apart.
    WAIT and WHATSUP (the status extension) have no column: they never move a flow, they
    are lines of its log (engine/status.py, SPEC.md "Status while working")."""

    WHICH = "which"
    METHODS = "methods"
    PAY = "pay"
    ORDER = "order"
    ORDER_PREPAID = "order_prepaid"
    FULFILL = "fulfill"
    INVOICE = "invoice"
    OFFER = "offer"
    ACCEPT = "accept"
    OOPS = "oops"
    # An OOPS whose error carries a refund (our extension, SPEC.md "Refunds"): a table
    # without a row for it reads it as the plain OOPS it also is.
    REFUND = "refund"


class Action(StrEnum):
    # guards: a failing guard refuses the message with its code, state unchanged
    ORDER_REF = "order_ref"  # FULFILL/INVOICE order_ref names this flow's ORDER
    INVOICE_REF = "invoice_ref"  # PAY invoice_ref names this flow's open INVOICE
    INVOICE_TERMS = "invoice_terms"  # PAY amount/token/chain satisfy the INVOICE
    OFFER_REF = "offer_ref"  # ACCEPT offer_ref names this flow's OFFER
    OFFER_TERMS = "offer_terms"  # ACCEPT amount/token/chain equal the OFFER's want
    WHICH_REF = "which_ref"  # METHODS which_ref names our WHICH
    # records: facts kept in the flow for later guards
    RECORD_WHICH = "record_which"
    RECORD_METHODS = "record_methods"
    RECORD_ORDER = "record_order"
    RECORD_INVOICE = "record_invoice"
    RECORD_OFFER = "record_offer"
    RECORD_PAYMENT = "record_payment"  # our PAY/OFFER/ACCEPT: what we paid, until answered
    RECORD_REFUSAL = "record_refusal"  # their OOPS to it: the payment moves to `refused`
    RECORD_REFUND = "record_refund"  # the refund their OOPS says was paid back (`refund`)
    # engine actions
    VERIFY_PROOF = "verify_proof"  # rail.verify against the ProofCheck of this step
    DECIDE_METHODS = "decide_methods"  # ask the application for METHODS
    DECIDE_ORDER = "decide_order"  # ask for an INVOICE, a FULFILL or a refusal
    FULFILL = "fulfill"  # paid: ask for the FULFILL result
    DECIDE_OFFER = "decide_offer"  # ask to counter-pay and ACCEPT, or refuse
    NOTIFY = "notify"  # tell the application (payer side: what arrived)
    VERIFY_REFUND = "verify_refund"  # rail.verify that the refund paid our wallet its amount
    VERIFY_EXCESS = "verify_excess"  # a FULFILL's overpayment excess paid back: rail.verify, kept


GUARDS = frozenset(
    {
        Action.ORDER_REF,
        Action.INVOICE_REF,
        Action.INVOICE_TERMS,
        Action.OFFER_REF,
        Action.OFFER_TERMS,
        Action.WHICH_REF,
    }
)
RECORDS = frozenset(
    {
        Action.RECORD_WHICH,
        Action.RECORD_METHODS,
        Action.RECORD_ORDER,
        Action.RECORD_INVOICE,
        Action.RECORD_OFFER,
        Action.RECORD_PAYMENT,
        Action.RECORD_REFUSAL,
        Action.RECORD_REFUND,
    }
)


@dataclass(frozen=True, slots=True)
class Row:
    state: str
    event: Event
    direction: Direction
    side: Side
    new_state: str
    actions: tuple[Action, ...] = ()


Table = tuple[Row, ...]


def oops_rows(states: Iterable[str], back: Mapping[tuple[str, Side], str] | None = None) -> tuple[Row, ...]:
    """OOPS may arrive or leave in any state: recorded, never a state change (spec:
    "No message requires a response. Silence is always valid. OOPS is a courtesy").

    `back` names the exceptions: an OOPS answering the payment we just made, in
    (state, our side), returns the flow to the state given, from which an honest retry
    (a new proof) is accepted; the refused payment stays recorded (`refused`)."""
    rows: list[Row] = []
    back = back or {}
    for state in states:
        for side in Side:
            to = back.get((state, side))
            if to is not None:
                refused = (Action.RECORD_REFUSAL, Action.NOTIFY)
                rows.append(Row(state, Event.OOPS, Direction.IN, side, to, refused))
            else:
                rows.append(Row(state, Event.OOPS, Direction.IN, side, state, (Action.NOTIFY,)))
            rows.append(Row(state, Event.OOPS, Direction.OUT, side, state, ()))
    return tuple(rows)


def refund_of(message: Message) -> dict[str, Any] | None:
    """The refund an OOPS carries in its error object (SPEC.md "Refunds"), when it names a
    proof: {chain, token, amount, wallet, proof, ...}; None otherwise."""
    error = message.error if isinstance(message, Oops) else None
    return _refund_shape((error.model_extra or {}).get("refund") if error is not None else None)


def excess_of(message: Message) -> dict[str, Any] | None:
    """The overpayment's excess a FULFILL says went back (`refund`, SPEC.md "Refunds"),
    when it names a proof; None otherwise. Never a flow event: the work is done either way."""
    return _refund_shape(message.refund) if isinstance(message, Fulfill) else None


def with_excess(fulfill: Fulfill, data: Mapping[str, Any]) -> Fulfill:
    """Our FULFILL carrying the overpayment's excess this flow paid back (its data's
    `refund`, reason `overpaid`), so the buyer sees why money came back."""
    refund = data.get("refund")
    if fulfill.refund is not None or not isinstance(refund, Mapping) or refund.get("reason") != "overpaid":
        return fulfill
    return fulfill.model_copy(update={"refund": dict(refund)})


def _refund_shape(refund: Any) -> dict[str, Any] | None:
    if not isinstance(refund, dict) or not isinstance(refund.get("proof"), dict):
        return None
    ok = all(isinstance(refund.get(k), str) for k in ("chain", "token", "amount"))
    return dict(refund) if ok and str(refund["amount"]).isdigit() else None


def event_of(message: Message) -> Event:
    if isinstance(message, Order) and message.prepaid:
        return Event.ORDER_PREPAID
    if refund_of(message) is not None:
        return Event.REFUND
    return Event(message.type)


@dataclass(frozen=True, slots=True)
class FlowState:
    kind: FlowKind
    side: Side
    state: str = START
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ProofCheck:
    """What a proof in this step must show. `recipient` None means "our own wallet for
    this chain and token" (the engine knows it); otherwise the wallet named in the flow."""

    proof: dict[str, Any]
    chain: str
    token: str
    amount: int
    recipient: str | None


@dataclass(frozen=True, slots=True)
class Step:
    ok: bool
    state: str
    data: Mapping[str, Any]
    actions: tuple[Action, ...] = ()
    oops: OopsCode | None = None
    detail: str = ""
    proof: ProofCheck | None = None

    @property
    def silent(self) -> bool:
        return not self.ok and self.oops is None


def _refuse(fs: FlowState, code: OopsCode | None, detail: str) -> Step:
    return Step(False, fs.state, fs.data, (), code, detail)


def _terms(amount: int, token: str, chain: str, want: Mapping[str, Any], at_least: bool) -> OopsCode | None:
    if chain != want["chain"]:
        return OopsCode.CHAIN_MISMATCH
    if token != want["token"]:
        return OopsCode.TOKEN_MISMATCH
    wanted = int(want["amount"])
    if amount < wanted or (not at_least and amount != wanted):
        return OopsCode.AMOUNT_MISMATCH
    return None


def _guard(action: Action, message: Message, data: Mapping[str, Any]) -> tuple[OopsCode, str] | None:
    if action is Action.ORDER_REF:
        ref = getattr(message, "order_ref", None)
        # FULFILL must carry order_ref; INVOICE may, and then it must match.
        if (isinstance(message, Fulfill) or ref is not None) and (
            ref is None or ref != data.get("order", {}).get("id")
        ):
            return OopsCode.UNKNOWN_REF, f"order_ref {ref!r} names no ORDER of this flow"
    elif action is Action.INVOICE_REF:
        assert isinstance(message, Pay)
        invoice = data.get("invoice")
        if invoice is None:
            return OopsCode.UNKNOWN_REF, "no open INVOICE in this flow"
        # Either the typed ref or In-Reply-To joined the PAY to this flow; a typed ref
        # that is present must name the open INVOICE.
        if message.invoice_ref is not None and message.invoice_ref != invoice["id"]:
            return OopsCode.UNKNOWN_REF, f"invoice_ref {message.invoice_ref!r} names no open INVOICE"
    elif action is Action.INVOICE_TERMS:
        assert isinstance(message, Pay)
        invoice = data["invoice"]
        code = _terms(message.amount, message.token, message.chain, invoice, at_least=True)
        if code is not None:
            return code, "PAY does not satisfy the INVOICE's amount, token and chain"
    elif action is Action.OFFER_REF:
        assert isinstance(message, Accept)
        if message.offer_ref != data.get("offer", {}).get("id"):
            return OopsCode.UNKNOWN_REF, f"offer_ref {message.offer_ref!r} names no OFFER of this flow"
    elif action is Action.OFFER_TERMS:
        assert isinstance(message, Accept)
        # Spec ACCEPT: amount/token/chain "must match OFFER's want" — equality.
        code = _terms(message.amount, message.token, message.chain, data["offer"]["want"], at_least=False)
        if code is not None:
            return code, "ACCEPT does not match the OFFER's want"
    elif action is Action.WHICH_REF:
        assert isinstance(message, Methods)
        if message.which_ref is not None and message.which_ref != data.get("which_id"):
            return OopsCode.UNKNOWN_REF, f"which_ref {message.which_ref!r} names no WHICH of ours"
    return None


def _record(action: Action, message: Message, data: dict[str, Any]) -> None:
    body = message.model_dump(mode="json")
    if action is Action.RECORD_WHICH:
        assert isinstance(message, Which)
        data["which_id"] = message.id
    elif action is Action.RECORD_METHODS:
        data["methods"] = body
    elif action is Action.RECORD_ORDER:
        data["order"] = body
    elif action is Action.RECORD_INVOICE:
        data["invoice"] = body
    elif action is Action.RECORD_OFFER:
        data["offer"] = body
    elif action is Action.RECORD_PAYMENT:
        data["payment"] = _payment(message, data)
    elif action is Action.RECORD_REFUND:
        data["refund"] = refund_of(message)
    elif action is Action.RECORD_REFUSAL:
        assert isinstance(message, Oops)
        payment = data.pop("payment", None)
        if payment is not None:
            code = message.error.code if message.error is not None else None
            data["refused"] = [*data.get("refused", ()), {**payment, "oops": code, "note": message.note}]


def _payment(message: Message, data: Mapping[str, Any]) -> dict[str, Any]:
    """What one of our paying messages moved on chain, and to whom, as the flow remembers it."""
    if isinstance(message, Offer):
        g = message.give
        return {"message": message.type, "id": message.id, "chain": g.chain, "token": g.token,
                "amount": str(g.amount), "to": g.to, "proof": dict(g.proof)}
    assert isinstance(message, (Pay, Accept, Order)) and message.proof is not None
    to = payee_wallet(message.type, data)
    return {"message": message.type, "id": message.id, "chain": message.chain, "token": message.token,
            "amount": str(message.amount), **({"to": to} if to else {}), "proof": dict(message.proof)}


def payee_wallet(kind: str, data: Mapping[str, Any]) -> str | None:
    """The wallet a paying message paid, from what the flow holds (a PAY carries none):
    a PAY's is its INVOICE's wallet, an ACCEPT's the OFFER's wallet; None when unknown
    (a PAY with no INVOICE, a prepaid ORDER)."""
    source = {"pay": data.get("invoice"), "accept": data.get("offer")}.get(kind)
    wallet = source.get("wallet") if isinstance(source, Mapping) else None
    return str(wallet) if wallet else None


def _proof_check(message: Message, data: Mapping[str, Any], direction: Direction) -> ProofCheck | None:
    if isinstance(message, Pay):
        invoice = data.get("invoice")
        # Against an INVOICE the money goes to the wallet the INVOICE named.
        return ProofCheck(
            message.proof,
            message.chain,
            message.token,
            message.amount,
            invoice["wallet"] if invoice else None,
        )
    if isinstance(message, Order) and message.prepaid:
        assert message.amount is not None and message.token and message.chain and message.proof is not None
        return ProofCheck(message.proof, message.chain, message.token, message.amount, None)
    if isinstance(message, Offer):
        # The give leg names its recipient; the engine checks it is one of our wallets.
        g = message.give
        return ProofCheck(g.proof, g.chain, g.token, g.amount, g.to)
    if isinstance(message, Accept):
        offer = data["offer"]
        return ProofCheck(message.proof, message.chain, message.token, message.amount, offer["wallet"])
    return None


def step_table(
    table: Table, fs: FlowState, message: Message, direction: Direction, event: Event | None = None
) -> Step:
    """One transition of `table`. Pure; a message that does not fit leaves `fs` as it was.
    `event` reads the message as another (a refund whose proof did not verify: a plain OOPS)."""
    event = event or event_of(message)
    row = _lookup(table, fs.state, event, direction, fs.side)
    if row is None and event is Event.REFUND:
        event = Event.OOPS
        row = _lookup(table, fs.state, event, direction, fs.side)
    if row is None:
        return _refuse(fs, ILLEGAL, f"{event.value} {direction.value} is not expected in state {fs.state}")
    for action in row.actions:
        if action in GUARDS:
            failed = _guard(action, message, fs.data)
            if failed is not None:
                return _refuse(fs, failed[0], failed[1])
    data = dict(fs.data)
    for action in row.actions:
        if action in RECORDS:
            _record(action, message, data)
    engine_actions = tuple(a for a in row.actions if a not in GUARDS and a not in RECORDS)
    proof = _proof_check(message, data, direction) if Action.VERIFY_PROOF in engine_actions else None
    return Step(True, row.new_state, data, engine_actions, None, "", proof)


_INDEX: dict[int, dict[tuple[str, Event, Direction, Side], Row]] = {}


def _lookup(table: Table, state: str, event: Event, direction: Direction, side: Side) -> Row | None:
    index = _INDEX.get(id(table))
    if index is None:
        index = {(r.state, r.event, r.direction, r.side): r for r in table}
        _INDEX[id(table)] = index
    return index.get((state, event, direction, side))


def states_of(table: Table) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for row in table:
        seen.setdefault(row.state)
        seen.setdefault(row.new_state)
    return tuple(seen)


def refusal_is_silent(message: Message) -> bool:
    """Never answer an OOPS with an OOPS."""
    return isinstance(message, Oops)


def starting_event(message: Message) -> tuple[FlowKind, Side, Side] | None:
    """The flow a message opens when it joins no existing flow: (kind, our side when it
    arrives, our side when we send it). METHODS, FULFILL, ACCEPT and OOPS open none."""
    event = event_of(message)
    return _STARTS.get(event)


_STARTS: dict[Event, tuple[FlowKind, Side, Side]] = {
    Event.WHICH: (FlowKind.FIRST_CONTACT, Side.PAYEE, Side.PAYER),
    Event.ORDER: (FlowKind.ORDER, Side.PAYEE, Side.PAYER),
    Event.ORDER_PREPAID: (FlowKind.PREPAID, Side.PAYEE, Side.PAYER),
    Event.PAY: (FlowKind.PAY, Side.PAYEE, Side.PAYER),
    Event.INVOICE: (FlowKind.INVOICE, Side.PAYER, Side.PAYEE),
    Event.OFFER: (FlowKind.EXCHANGE, Side.PAYEE, Side.PAYER),
}
