"""The flow tables: every illegal transition, generated from the tables, ends in its
documented code with the state unchanged; every guard refuses with its code; the
happy paths of both sides run through each flow."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from envelopay import flows
from envelopay.flows import ILLEGAL, TABLES, Action, Direction, Event, FlowKind, FlowState, Side
from envelopay.flows.core import GUARDS, states_of
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Message,
    Methods,
    Offer,
    Oops,
    OopsError,
    Order,
    Pay,
    RailMethod,
    Want,
    Which,
)

PROOF = {"tx": "abc"}
SAMPLES: dict[Event, Message] = {
    Event.WHICH: Which(id="wch_1"),
    Event.METHODS: Methods(rails=[RailMethod(chain="c", token="T", wallet="W", price=1)], which_ref="wch_1"),
    Event.PAY: Pay(id="pay_1", amount=100, token="T", chain="c", proof=PROOF, invoice_ref="inv_1"),
    Event.ORDER: Order(id="ord_1", task={"op": "x"}),
    Event.ORDER_PREPAID: Order(
        v="0.2.0", id="ord_1", task={"op": "x"}, amount=100, token="T", chain="c", proof=PROOF
    ),
    Event.FULFILL: Fulfill(id="ful_1", order_ref="ord_1", result={"ok": True}),
    Event.INVOICE: Invoice(id="inv_1", amount=100, token="T", chain="c", wallet="W", order_ref="ord_1"),
    Event.OFFER: Offer(
        id="ofr_1",
        give=Give(amount=1, token="SOL", chain="c", to="W", proof=PROOF),
        want=Want(amount=50, token="USDC", chain="base"),
        wallet="W-offerer",
    ),
    Event.ACCEPT: Accept(id="acc_1", offer_ref="ofr_1", amount=50, token="USDC", chain="base", proof=PROOF),
    Event.OOPS: Oops(note="something", ref="x"),
    Event.REFUND: Oops(note="task_failed", ref="x", error=OopsError(code="task_failed", refund={
        "chain": "c", "token": "T", "amount": "100", "wallet": "W-payer", "proof": PROOF})),
}
# Facts that satisfy every guard for the samples above.
FACTS: dict[str, Any] = {
    "order": SAMPLES[Event.ORDER].model_dump(mode="json"),
    "invoice": SAMPLES[Event.INVOICE].model_dump(mode="json"),
    "offer": SAMPLES[Event.OFFER].model_dump(mode="json"),
    "which_id": "wch_1",
}


def _keys() -> list[tuple[FlowKind, str, Event, Direction, Side]]:
    out = []
    for kind, table in TABLES.items():
        for state, event, direction, side in itertools.product(states_of(table), Event, Direction, Side):
            out.append((kind, state, event, direction, side))
    return out


def _rows(kind: FlowKind) -> dict[tuple[str, Event, Direction, Side], flows.Row]:
    return {(r.state, r.event, r.direction, r.side): r for r in TABLES[kind]}


def _as_oops(k: tuple[FlowKind, str, Event, Direction, Side]) -> bool:
    """A refund where no row names it is read as the plain OOPS it also is (SPEC.md "Refunds")."""
    return k[2] is Event.REFUND and (k[1], Event.OOPS, k[3], k[4]) in _rows(k[0])


ILLEGAL_CASES = [k for k in _keys() if (k[1], k[2], k[3], k[4]) not in _rows(k[0]) and not _as_oops(k)]
LEGAL_CASES = [k for k in _keys() if (k[1], k[2], k[3], k[4]) in _rows(k[0])]


def test_tables_have_one_row_per_key() -> None:
    for kind, table in TABLES.items():
        keys = [(r.state, r.event, r.direction, r.side) for r in table]
        assert len(keys) == len(set(keys)), kind


def test_generated_cases_cover_both_outcomes() -> None:
    assert len(ILLEGAL_CASES) > 500 and len(LEGAL_CASES) > 50


@pytest.mark.parametrize(("kind", "state", "event", "direction", "side"), ILLEGAL_CASES)
def test_every_illegal_transition_is_refused_with_state_unchanged(
    kind: FlowKind, state: str, event: Event, direction: Direction, side: Side
) -> None:
    fs = FlowState(kind, side, state, dict(FACTS))
    step = flows.step(fs, SAMPLES[event], direction)
    assert not step.ok
    assert step.oops is ILLEGAL is OopsCode.UNEXPECTED_MESSAGE
    assert step.state == state and step.data == FACTS and step.actions == ()


@pytest.mark.parametrize(("kind", "state", "event", "direction", "side"), LEGAL_CASES)
def test_every_legal_transition_with_good_refs_moves(
    kind: FlowKind, state: str, event: Event, direction: Direction, side: Side
) -> None:
    row = _rows(kind)[(state, event, direction, side)]
    step = flows.step(FlowState(kind, side, state, dict(FACTS)), SAMPLES[event], direction)
    assert step.ok, step
    assert step.state == row.new_state
    assert step.actions == tuple(
        a for a in row.actions if a not in GUARDS and not a.value.startswith("record_")
    )
    assert (step.proof is not None) == (Action.VERIFY_PROOF in row.actions)


# Each guard, and messages that break it, with the code each must get.
BREAKERS: dict[Action, list[tuple[Event, dict[str, Any], OopsCode]]] = {
    Action.ORDER_REF: [
        (Event.FULFILL, {"order_ref": "ord_other"}, OopsCode.UNKNOWN_REF),
        (Event.INVOICE, {"order_ref": "ord_other"}, OopsCode.UNKNOWN_REF),
    ],
    Action.INVOICE_REF: [(Event.PAY, {"invoice_ref": "inv_other"}, OopsCode.UNKNOWN_REF)],
    Action.INVOICE_TERMS: [
        (Event.PAY, {"amount": 99}, OopsCode.AMOUNT_MISMATCH),
        (Event.PAY, {"token": "OTHER"}, OopsCode.TOKEN_MISMATCH),
        (Event.PAY, {"chain": "other"}, OopsCode.CHAIN_MISMATCH),
    ],
    Action.OFFER_REF: [(Event.ACCEPT, {"offer_ref": "ofr_other"}, OopsCode.UNKNOWN_REF)],
    Action.OFFER_TERMS: [
        (Event.ACCEPT, {"amount": 49}, OopsCode.AMOUNT_MISMATCH),
        (Event.ACCEPT, {"amount": 51}, OopsCode.AMOUNT_MISMATCH),  # equality, not "at least"
        (Event.ACCEPT, {"token": "USDT"}, OopsCode.TOKEN_MISMATCH),
        (Event.ACCEPT, {"chain": "solana"}, OopsCode.CHAIN_MISMATCH),
    ],
    Action.WHICH_REF: [(Event.METHODS, {"which_ref": "wch_other"}, OopsCode.UNKNOWN_REF)],
}

GUARD_CASES = [
    (kind, row, change, code)
    for kind, table in TABLES.items()
    for row in table
    for action in row.actions
    if action in GUARDS
    for event, change, code in BREAKERS[action]
    if event is row.event
]


def test_every_guard_has_breakers() -> None:
    used = {a for t in TABLES.values() for r in t for a in r.actions if a in GUARDS}
    assert used == set(BREAKERS)
    assert len(GUARD_CASES) > 20


@pytest.mark.parametrize(
    ("kind", "row", "change", "code"),
    GUARD_CASES,
    ids=[f"{k}-{r.state}-{r.event}-{r.direction}-{r.side}-{c}" for k, r, _, c in GUARD_CASES],
)
def test_every_guard_refuses_with_its_code(
    kind: FlowKind, row: flows.Row, change: dict[str, Any], code: OopsCode
) -> None:
    bad = SAMPLES[row.event].model_copy(update=change)
    fs = FlowState(kind, row.side, row.state, dict(FACTS))
    step = flows.step(fs, bad, row.direction)
    assert not step.ok and step.oops is code
    assert step.state == row.state and step.data == FACTS


def test_pay_may_exceed_the_invoice_but_not_undercut_it() -> None:
    fs = FlowState(FlowKind.INVOICE, Side.PAYEE, "invoiced", dict(FACTS))
    assert flows.step(fs, SAMPLES[Event.PAY].model_copy(update={"amount": 101}), Direction.IN).ok
    # A PAY joined only by threading (no invoice_ref) is checked against the open invoice.
    step = flows.step(fs, SAMPLES[Event.PAY].model_copy(update={"invoice_ref": None}), Direction.IN)
    assert step.ok and step.proof is not None and step.proof.recipient == "W"


def test_fulfill_without_recorded_order_is_unknown_ref() -> None:
    fs = FlowState(FlowKind.ORDER, Side.PAYER, "ordered", {})
    step = flows.step(fs, SAMPLES[Event.FULFILL], Direction.IN)
    assert step.oops is OopsCode.UNKNOWN_REF and step.state == "ordered"


def _run(kind: FlowKind, side: Side, moves: list[tuple[Event, Direction]]) -> list[str]:
    fs = FlowState(kind, side)
    states = []
    for event, direction in moves:
        step = flows.step(fs, SAMPLES[event], direction)
        assert step.ok, (kind, side, fs.state, event, direction, step)
        fs = FlowState(kind, side, step.state, step.data)
        states.append(step.state)
    return states


IN, OUT = Direction.IN, Direction.OUT


@pytest.mark.parametrize(
    ("kind", "payer", "payee", "end"),
    [
        (FlowKind.PAY, [(Event.PAY, OUT)], [(Event.PAY, IN)], "paid"),
        (
            FlowKind.ORDER,
            [(Event.ORDER, OUT), (Event.INVOICE, IN), (Event.PAY, OUT), (Event.FULFILL, IN)],
            [(Event.ORDER, IN), (Event.INVOICE, OUT), (Event.PAY, IN), (Event.FULFILL, OUT)],
            "fulfilled",
        ),
        (
            FlowKind.ORDER,
            [(Event.ORDER, OUT), (Event.FULFILL, IN)],
            [(Event.ORDER, IN), (Event.FULFILL, OUT)],
            "fulfilled",
        ),  # free work
        (
            FlowKind.INVOICE,
            [(Event.INVOICE, IN), (Event.PAY, OUT)],
            [(Event.INVOICE, OUT), (Event.PAY, IN)],
            "paid",
        ),
        (
            FlowKind.FIRST_CONTACT,
            [
                (Event.WHICH, OUT),
                (Event.METHODS, IN),
                (Event.ORDER, OUT),
                (Event.INVOICE, IN),
                (Event.PAY, OUT),
                (Event.FULFILL, IN),
            ],
            [
                (Event.WHICH, IN),
                (Event.METHODS, OUT),
                (Event.ORDER, IN),
                (Event.INVOICE, OUT),
                (Event.PAY, IN),
                (Event.FULFILL, OUT),
            ],
            "fulfilled",
        ),
        (
            FlowKind.FIRST_CONTACT,
            [(Event.WHICH, OUT), (Event.METHODS, IN), (Event.ORDER_PREPAID, OUT), (Event.FULFILL, IN)],
            [(Event.WHICH, IN), (Event.METHODS, OUT), (Event.ORDER_PREPAID, IN), (Event.FULFILL, OUT)],
            "fulfilled",
        ),
        (
            FlowKind.EXCHANGE,
            [(Event.OFFER, OUT), (Event.ACCEPT, IN)],
            [(Event.OFFER, IN), (Event.ACCEPT, OUT)],
            "accepted",
        ),
        (
            FlowKind.PREPAID,
            [(Event.ORDER_PREPAID, OUT), (Event.FULFILL, IN)],
            [(Event.ORDER_PREPAID, IN), (Event.FULFILL, OUT)],
            "fulfilled",
        ),
    ],
)
def test_both_sides_walk_the_spec_flows(
    kind: FlowKind, payer: list[tuple[Event, Direction]], payee: list[tuple[Event, Direction]], end: str
) -> None:
    assert _run(kind, Side.PAYER, payer)[-1] == end
    assert _run(kind, Side.PAYEE, payee)[-1] == end
    # The two sides see the same messages, mirrored.
    assert [e for e, _ in payer] == [e for e, _ in payee]
    assert all(a is not b for (_, a), (_, b) in zip(payer, payee, strict=True))


def test_opening_messages() -> None:
    assert flows.opening(SAMPLES[Event.WHICH], IN) == FlowState(FlowKind.FIRST_CONTACT, Side.PAYEE)
    assert flows.opening(SAMPLES[Event.INVOICE], IN) == FlowState(FlowKind.INVOICE, Side.PAYER)
    assert flows.opening(SAMPLES[Event.INVOICE], OUT) == FlowState(FlowKind.INVOICE, Side.PAYEE)
    assert flows.opening(SAMPLES[Event.ORDER_PREPAID], IN) == FlowState(FlowKind.PREPAID, Side.PAYEE)
    for event in (Event.METHODS, Event.FULFILL, Event.ACCEPT, Event.OOPS):
        assert flows.opening(SAMPLES[event], IN) is None


def test_every_state_is_reachable_from_start() -> None:
    for kind, table in TABLES.items():
        reach, frontier = {"start"}, ["start"]
        while frontier:
            s = frontier.pop()
            for r in table:
                if r.state == s and r.new_state not in reach:
                    reach.add(r.new_state)
                    frontier.append(r.new_state)
        assert reach == set(states_of(table)), kind
