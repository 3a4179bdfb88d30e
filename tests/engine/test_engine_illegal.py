"""End to end: in every state the worker's ledger can hold, every inbound message the
flow table has no row for is refused with the table's documented code (or silence for
an OOPS), and the stored flow is unchanged. Cases are generated from the tables."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from tests._engines import prepaid, worker

from envelopay import flows
from envelopay.flows import ILLEGAL, Direction, FlowKind, FlowState, Side
from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Message,
    Methods,
    Offer,
    Oops,
    RailMethod,
    Want,
    Which,
)
from envelopay.testing import mock_rail as k


class Case:
    def __init__(self, tmp: Path) -> None:
        self.store = SqliteStore(tmp / "ledger.db")
        self.rail = k.DictRail({f"t{i}": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE) for i in range(5)})
        self.rail.txs["give"] = k.Tx(k.WORKER_WALLET, k.TOKEN, 7)
        self.engine = worker(self.store, self.rail, "x")


Setup = Callable[[Case], Awaitable[str]]


async def _order(c: Case) -> str:
    return (await c.engine.handle(k.raw(k.order("ord_1")))).flow_id or ""


async def _free(c: Case) -> str:
    return (await c.engine.handle(k.raw(k.order("ord_1", op="free")))).flow_id or ""


async def _which(c: Case) -> str:
    return (await c.engine.handle(k.raw(Which(id="wch_1")))).flow_id or ""


async def _invoice(c: Case) -> str:
    inv = Invoice(id="inv_1", amount=k.PRICE, token=k.TOKEN, chain=k.CHAIN, wallet=k.WORKER_WALLET)
    return (await c.engine.send(inv, k.BUYER)).flow_id


async def _invoice_paid(c: Case) -> str:
    fid = await _invoice(c)
    await c.engine.handle(k.raw(k.pay("pay_1", "t1", invoice_ref="inv_1")))
    return fid


async def _offer(c: Case) -> str:
    offer = Offer(
        id="ofr_1",
        give=Give(amount=7, token=k.TOKEN, chain=k.CHAIN, to=k.WORKER_WALLET, proof={"tx": "give"}),
        want=Want(amount=3, token=k.TOKEN, chain=k.CHAIN),
        wallet=k.BUYER_WALLET,
    )
    return (await c.engine.handle(k.raw(k.bind(offer)))).flow_id or ""


async def _prepaid(c: Case) -> str:
    order = prepaid("ord_p", "t2")
    return (await c.engine.handle(k.raw(k.bind(order)))).flow_id or ""


async def _pay(c: Case) -> str:
    return (await c.engine.handle(k.raw(k.bind(k.pay("pay_u", "t3"))))).flow_id or ""


SETUPS: dict[str, tuple[Setup, FlowKind, str]] = {
    "order-invoiced": (_order, FlowKind.ORDER, "invoiced"),
    "order-fulfilled": (_free, FlowKind.ORDER, "fulfilled"),
    "first_contact-quoted": (_which, FlowKind.FIRST_CONTACT, "quoted"),
    "invoice-invoiced": (_invoice, FlowKind.INVOICE, "invoiced"),
    "invoice-paid": (_invoice_paid, FlowKind.INVOICE, "paid"),
    "exchange-accepted": (_offer, FlowKind.EXCHANGE, "accepted"),
    "prepaid-fulfilled": (_prepaid, FlowKind.PREPAID, "fulfilled"),
    "pay-paid": (_pay, FlowKind.PAY, "paid"),
}

# Inbound messages that cannot open a flow of their own, so threading keeps them in the
# flow under test (refs name nothing of ours: only In-Reply-To joins them).
PROBES: dict[str, Message] = {
    "methods": Methods(rails=[RailMethod(chain=k.CHAIN, token=k.TOKEN, wallet="W", price=1)]),
    "fulfill": Fulfill(id="ful_x", order_ref="ord_1", result=1),
    "accept": Accept(
        id="acc_x", offer_ref="ofr_1", amount=3, token=k.TOKEN, chain=k.CHAIN, proof={"tx": "t4"}
    ),
    "oops": Oops(note="hmm"),
}

CASES = [
    (name, probe)
    for name, (_, kind, state) in SETUPS.items()
    for probe in PROBES
    if probe == "oops" or not flows.accepts(FlowState(kind, Side.PAYEE, state), PROBES[probe], Direction.IN)
]


def test_cases_cover_every_setup() -> None:
    assert {n for n, _ in CASES} == set(SETUPS) and len(CASES) == len(SETUPS) * len(PROBES)


@pytest.mark.parametrize(("setup", "probe"), CASES)
async def test_illegal_inbound_is_refused_and_changes_nothing(tmp_path: Path, setup: str, probe: str) -> None:
    c = Case(tmp_path)
    make, kind, state = SETUPS[setup]
    flow_id = await make(c)
    before = c.store.get_flow(flow_id)
    assert before is not None and (before.kind, before.state) == (kind.value, state)
    last = c.store.flow_log(flow_id)[-1].message_id
    outcome = await c.engine.handle(k.raw(PROBES[probe], in_reply_to=last))
    after = c.store.get_flow(flow_id)
    table = flows.step(FlowState(kind, Side.PAYEE, state, before.data), PROBES[probe], Direction.IN)
    if probe == "oops" and table.state != state:
        # An OOPS answering our counter-payment (ACCEPT) returns the flow (issue 15): the
        # engine stores what the table says, the payment moved under `refused`.
        assert after is not None and (after.state, dict(after.data)) == (table.state, dict(table.data))
        assert "refused" in after.data
    else:
        assert after == before  # state, facts and version untouched
    if probe == "oops":
        # The table records OOPS in every state; never OOPS an OOPS.
        assert outcome.outbox == () and outcome.oops is None and outcome.flow_id == flow_id
    else:
        assert (outcome.status, outcome.oops) == ("refused", ILLEGAL)
        assert len(outcome.outbox) == 1
        reply = c.store.outbox_get(outcome.outbox[0])
        assert reply is not None and isinstance(reply.outbound.message, Oops)
        assert reply.outbound.in_reply_to is not None
    c.store.close()
