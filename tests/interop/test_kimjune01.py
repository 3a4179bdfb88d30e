"""Interop with the protocol author's implementation (kimjune01/envelopay), modelled in
tests/interop/_kimjune01.py from fixtures/interop/kimjune01/: every flow it implements,
both ways, with our real engine on a real SQLite ledger, and every one of our nine
types read by its extractors with the fields intact. Where the reference itself is
broken (README "Where the reference cannot work"), the test pins the breakage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.interop import _kimjune01 as them

from envelopay.engine import Engine, Outcome
from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.compose import compose, message_json
from envelopay.protocol.lenient import derived_id, lenient_warnings
from envelopay.protocol.messages import (
    SPEC_TYPES,
    Accept,
    Fulfill,
    Give,
    Invoice,
    Message,
    MessageType,
    Methods,
    Offer,
    Oops,
    Order,
    Pay,
    Want,
    Which,
    model_for,
)
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "conformance"
BODIES: dict[str, dict[str, Any]] = {
    v["expect"]["type"]: v["expect"]["body"]
    for v in json.loads((CORPUS / "manifest.json").read_text())["vectors"]
    if v["file"].startswith("composed/")
}
SOL_WALLET = "6dL6n77jJFWq4bu3cQp57H8rMUPEXu7uYN1XApPxpUif"


def lenient(raw: bytes) -> Any:
    return parse(raw, options=ParseOptions(profile="lenient"))


class SolRail:
    """A dict of Solana transactions (what the author's ACCEPT proves) for our buyer."""

    name = "dictsol"
    chains = ("solana",)

    def __init__(self) -> None:
        self.txs: dict[str, tuple[str, int]] = {}

    def assets(self) -> tuple[AssetInfo, ...]:
        return (AssetInfo("solana", "SOL", None, 9),)

    def proof_key(self, proof: dict[str, Any]) -> str:
        tx = proof.get("tx")
        if not isinstance(tx, str) or not tx:
            raise ValueError("proof needs a 'tx' string")
        return tx

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        found = self.txs.get(self.proof_key(proof))
        if found is None:
            return Verdict.rejected(Reason.TX_NOT_FOUND)
        to, amount = found
        if to != expectation.recipient:
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH)
        if amount != expectation.amount:
            return Verdict.rejected(Reason.AMOUNT_MISMATCH)
        return Verdict.accepted(observed_amount=amount, payer="them", tx_time=k.T0, proof_key=proof["tx"])

    async def pay(self, *, chain: str, token: str, amount: int, recipient: str) -> dict[str, Any]:
        raise AssertionError("our buyer never pays on this rail in these tests")


class Ours:
    """Our buyer and our worker, each an Engine on one SQLite ledger, parsing with the
    `lenient` profile (the mailbox option for peers like this one)."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = SqliteStore(tmp_path / "ledger.db")
        self.rail = k.DictRail()
        self.sol = SolRail()
        self.clock = k.Clock()
        self.app = WorkerApp(self.rail)
        self.buyer_app = WorkerApp(None, wallet=SOL_WALLET)
        self.worker = self._engine(k.WORKER, self.app, {k.CHAIN: self.rail}, "w")
        self.buyer = self._engine(k.BUYER, self.buyer_app, {"solana": self.sol}, "b")

    def _engine(self, address: str, app: Any, rails: dict[str, Any], prefix: str) -> Engine:
        return Engine(
            self.store,
            address=address,
            domain=address.split("@")[1],
            rails=rails,
            app=app,
            clock=self.clock,
            id_factory=k.counter_ids(prefix),
            parser=lenient,
        )

    async def send(self, message: Message, to: str, **kw: Any) -> bytes:
        sent = await self.buyer.send(message, to, **kw)
        return compose(sent.outbound)

    def replies(self, outcome: Outcome) -> list[bytes]:
        out = []
        for mid in outcome.outbox:
            row = self.store.outbox_get(mid)
            assert row is not None
            out.append(compose(row.outbound))
        return out


@pytest.fixture
def ours(tmp_path: Path) -> Ours:
    return Ours(tmp_path)


# ------------------------------------------------------------------ the nine types, read by their extractors


# The nine: WAIT and WHATSUP (the status extension) never go to a peer that did not
# advertise it, and this one does not (tests/interop/test_status_strict.py).
@pytest.mark.parametrize("kind", list(SPEC_TYPES))
def test_every_type_we_compose_reaches_each_of_their_extractors_intact(kind: MessageType) -> None:
    body = BODIES[kind.value]
    message = model_for(kind).model_validate(body, context={"wire": True})
    raw = compose(k_outbound(message))
    got = them.receive(raw)
    for rule in ("whole_then_line", "whole_only", "line_then_whole"):
        assert them.extract(rule, got.text) == body, rule
    for component in ("exchange", "mailroom", "lambda_poller", "shop"):
        assert them.route(component, got.subject) == kind.keyword, component


def test_our_old_text_part_gave_their_extractors_nothing() -> None:
    # The layout compose wrote before issue 12: prose, then the JSON indented.
    old = f"PAY | x\r\n\r\nThis is an Envelopay PAY message.\r\n\r\n{json.dumps(BODIES['pay'], indent=2)}"
    assert them.extract("whole_then_line", old) == {}
    assert them.extract("whole_only", old) == {}


def test_their_own_replies_defeat_their_own_extractor() -> None:
    # README "Where the reference cannot work" 1 (exchange/reply.py:82, routes.py:35-48).
    methods = them.Exchange().handle(them.spec_which("axiomatic@agentmail.test"))[0]
    # `Re: WHICH | ...` routes as a WHICH again, and the type line leaves no JSON it can read.
    assert them.read_reply(methods) == ("WHICH", {})
    assert them.extract("whole_then_line", them.receive(methods).text) == {}
    # We read it (lenient): METHODS, with the price-less Solana rail.
    p = lenient(methods)
    assert p.valid and p.type is MessageType.METHODS
    assert isinstance(p.message, Methods) and [r.price for r in p.message.rails] == [13000, 13000, None]
    assert not parse(methods).protocol  # strict: a Re: subject is not protocol


# ------------------------------------------------------------------ our buyer against their workers


async def test_which_methods_with_their_exchange(ours: Ours) -> None:
    ex = them.Exchange()
    which = await ours.send(Which(id="wch_1", note="Code review"), ex.inbox)
    (methods,) = ex.handle(which)
    strict = parse(methods, options=ParseOptions(re_prefix="v0.2"))
    assert strict.type is MessageType.WHICH  # v0.2 Re: stripping alone misreads it (README 6)
    out = await ours.buyer.handle(methods)
    assert (out.status, out.state) == ("processed", "quoted")
    notice = ours.buyer_app.notices[-1]
    assert isinstance(notice.message, Methods) and notice.message.rails[2].price is None
    assert lenient_warnings(lenient(methods).warnings)


async def test_which_methods_with_their_shop_arrives_unthreaded(ours: Ours) -> None:
    shop = them.Shop()
    which = await ours.send(Which(id="wch_2"), shop.inbox)
    (methods,) = shop.handle(which)
    p = lenient(methods)
    assert p.valid and p.type is MessageType.METHODS and p.in_reply_to is None  # a new message
    assert not parse(methods).valid  # strict: the rail has no price
    out = await ours.buyer.handle(methods)
    # No thread and no which_ref: nothing ties it to our WHICH (shop/shop.py:75-105).
    assert (out.status, out.flow_id, out.oops) == ("refused", None, OopsCode.UNEXPECTED_MESSAGE)


async def test_which_with_note_gets_an_invoice_from_their_demo(ours: Ours) -> None:
    demo = them.Demo()
    # README 2: `WHICH | note` is not exactly WHICH, so the demo invoices it.
    (answer,) = demo.handle(await ours.send(Which(id="wch_3", note="Code review"), demo.inbox))
    assert lenient(answer).type is MessageType.INVOICE
    # A bare WHICH gets METHODS, and the first-contact flow completes.
    (methods,) = demo.handle(await ours.send(Which(id="wch_4"), demo.inbox))
    out = await ours.buyer.handle(methods)
    assert (out.status, out.state) == ("processed", "quoted")


async def test_order_fulfill_with_their_exchange(ours: Ours) -> None:
    ex = them.Exchange()
    order = await ours.send(
        Order(id="ord_1", task={"description": "Cashie UI Kit"}, note="Cashie UI Kit"), ex.inbox
    )
    (ful,) = ex.handle(order)
    p = lenient(ful)
    assert p.type is MessageType.FULFILL and isinstance(p.message, Fulfill)
    assert p.message.order_ref == "ord_1"  # their extractor read our id from the text part
    assert p.message.id == derived_id(p.message_id)
    out = await ours.buyer.handle(ful)
    assert (out.status, out.state) == ("processed", "fulfilled")


async def test_order_fulfill_with_their_shop(ours: Ours) -> None:
    shop = them.Shop()
    order = await ours.send(Order(id="ord_2", task="Example Template", note="Example Template"), shop.inbox)
    (ful,) = shop.handle(order)
    p = lenient(ful)
    # The shop reads only a text part that is entirely JSON: ours is.
    assert isinstance(p.message, Fulfill) and p.message.order_ref == "ord_2"
    out = await ours.buyer.handle(ful)
    assert (out.status, out.state) == ("processed", "fulfilled")


async def test_order_invoice_with_their_demo_never_fulfils(ours: Ours) -> None:
    demo = them.Demo()
    order = await ours.send(Order(id="ord_3", task={"description": "Review PR #417"}), demo.inbox)
    (inv,) = demo.handle(order)
    out = await ours.buyer.handle(inv)
    assert (out.status, out.state) == ("processed", "invoiced")
    invoice = lenient(inv).message
    assert isinstance(invoice, Invoice) and invoice.order_ref == "ord_3" and invoice.amount == 50000
    pay = Pay(
        id="pay_3", amount=50000, token="SOL", chain="solana", proof={"tx": "5xPaid"}, invoice_ref=invoice.id
    )
    raw_pay = await ours.send(pay, demo.inbox, flow_id=out.flow_id)
    (again,) = demo.handle(raw_pay)
    # README 2: a PAY is answered with another INVOICE; the demo never verifies or FULFILLs.
    assert lenient(again).type is MessageType.INVOICE


async def test_pay_with_their_exchange(ours: Ours) -> None:
    ex = them.Exchange(known_txs={"5xDonation"})
    pay = Pay(id="pay_1", amount=1000, token="SOL", chain="solana", proof={"tx": "5xDonation"}, note="tip")
    (thanks,) = ex.handle(await ours.send(pay, ex.inbox))
    assert ex.donations and ex.donations[0]["proof"] == {"tx": "5xDonation"}  # the proof reached it
    p = lenient(thanks)
    assert isinstance(p.message, Oops) and p.message.error is not None
    assert p.message.error.code == "donation_received"
    out = await ours.buyer.handle(thanks)
    assert out.status == "processed" and out.outbox == ()  # never answer an OOPS
    (missing,) = ex.handle(
        await ours.send(
            Pay(id="pay_2", amount=1, token="SOL", chain="solana", proof={"tx": "5xNope"}), ex.inbox
        )
    )
    assert (
        isinstance(lenient(missing).message, Oops) and lenient(missing).message.error.code == "tx_not_found"
    )  # type: ignore[union-attr]


async def test_offer_accept_with_their_exchange(ours: Ours) -> None:
    ex = them.Exchange()
    offer = Offer(
        id="ofr_1",
        give=Give(amount=300, token="USD", chain="cashapp", to="$seller", proof={"tx": "cash-1"}),
        want=Want(amount=2_000_000, token="SOL", chain="solana"),
        wallet=SOL_WALLET,
    )
    assert ex.handle(await ours.send(offer, ex.inbox)) == []  # silence while pending
    ours.sol.txs["5xAccept"] = (SOL_WALLET, 2_000_000)
    (accept,) = ex.payment_notice(300, "5xAccept", 2_000_000)
    p = lenient(accept)
    assert isinstance(p.message, Accept) and p.message.proof == {"tx": "5xAccept"}
    # README 4: offer_ref is their ledger row, not our OFFER's id; the thread still ties it.
    assert p.message.offer_ref == "1"
    out = await ours.buyer.handle(accept)
    assert (out.status, out.state, out.oops) == ("refused", "offered", OopsCode.UNKNOWN_REF)
    # Had it named our OFFER, the exchange flow completes (the proof verifies on our rail).
    fixed = accept.replace(b'"offer_ref": "1"', b'"offer_ref": "ofr_1"').replace(b"<am", b"<fixed-am")
    done = await ours.buyer.handle(fixed)
    assert (done.status, done.state) == ("processed", "accepted")


# ------------------------------------------------------------------ their buyer behaviour against our worker


async def test_their_which_gets_our_methods_and_they_read_it(ours: Ours) -> None:
    out = await ours.worker.handle(them.spec_which(k.WORKER))
    assert (out.status, out.state) == ("processed", "quoted")
    (methods,) = ours.replies(out)
    kind, body = them.read_reply(methods)
    assert kind == "METHODS" and body["rails"] == [
        {"chain": k.CHAIN, "token": k.TOKEN, "wallet": k.WORKER_WALLET, "price": str(k.PRICE)}
    ]


async def test_their_order_invoice_pay_fulfill_with_our_worker(ours: Ours) -> None:
    order = them.request(
        k.WORKER, "ORDER | echo", {"v": "0.1.0", "type": "order", "id": "ord_t1", "task": {"op": "echo"}}
    )
    out = await ours.worker.handle(order)
    assert (out.status, out.state) == ("processed", "invoiced")
    (inv,) = ours.replies(out)
    kind, body = them.read_reply(inv)
    assert kind == "INVOICE" and (body["amount"], body["token"], body["wallet"]) == (
        str(k.PRICE),
        k.TOKEN,
        k.WORKER_WALLET,
    )
    ours.rail.txs["tx_t1"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    pay = {
        "v": "0.1.0",
        "type": "pay",
        "id": "pay_t1",
        "amount": body["amount"],
        "token": body["token"],
        "chain": body["chain"],
        "proof": {"tx": "tx_t1"},
        "invoice_ref": body["id"],
    }
    # Their PAY is a reply: `Re: INVOICE | ...`, then `PAY | note` and the pretty JSON.
    raw_pay = them.reply(them.receive(inv), "axiomatic@agentmail.test", "PAY | settling", pay)
    assert not parse(raw_pay).protocol  # strict drops it
    paid = await ours.worker.handle(raw_pay)
    assert (paid.status, paid.state, paid.flow_id) == ("processed", "fulfilled", out.flow_id)
    (ful,) = ours.replies(paid)
    kind, body = them.read_reply(ful)
    assert kind == "FULFILL" and body["order_ref"] == "ord_t1" and body["result"] == {"echo": {"op": "echo"}}


async def test_their_free_order_is_fulfilled(ours: Ours) -> None:
    order = them.request(
        k.WORKER, "ORDER | free", {"v": "0.1.0", "type": "order", "id": "ord_t2", "task": {"op": "free"}}
    )
    out = await ours.worker.handle(order)
    assert (out.status, out.state) == ("processed", "fulfilled")
    kind, body = them.read_reply(ours.replies(out)[0])
    assert kind == "FULFILL" and body["order_ref"] == "ord_t2"


async def test_their_pay_is_verified_by_our_worker(ours: Ours) -> None:
    ours.rail.txs["tx_t3"] = k.Tx(k.WORKER_WALLET, k.TOKEN, 5)
    pay = {
        "v": "0.1.0",
        "type": "pay",
        "id": "pay_t3",
        "amount": "5",
        "token": k.TOKEN,
        "chain": k.CHAIN,
        "proof": {"tx": "tx_t3"},
    }
    out = await ours.worker.handle(them.request(k.WORKER, "PAY | tip", pay))
    # An unsolicited v0.1 PAY carries no binding (SPEC.md "Proof binding"): refused with
    # payer_mismatch, which they read as an OOPS, and the transfer is not spent.
    assert (out.status, out.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    kind, body = them.read_reply(ours.replies(out)[0])
    assert kind == "OOPS" and "payer_sig" in body["note"]


async def test_their_offer_gets_our_accept_and_they_read_it(ours: Ours) -> None:
    ours.rail.txs["give_t4"] = k.Tx(k.WORKER_WALLET, k.TOKEN, 7)
    give = {"amount": "7", "token": k.TOKEN, "chain": k.CHAIN, "to": k.WORKER_WALLET}
    give["proof"] = {"tx": "give_t4"}
    offer = {
        "v": "0.1.0", "type": "offer", "id": "ofr_t4", "wallet": "W-them", "give": give,
        "want": {"amount": "3", "token": k.TOKEN, "chain": k.CHAIN},
    }  # fmt: skip
    out = await ours.worker.handle(them.request(k.WORKER, "OFFER | swap", offer))
    # An unbound give leg never buys a counter-payment (SPEC.md "Proof binding").
    assert (out.status, out.oops) == ("refused", OopsCode.PAYER_MISMATCH)
    kind, _body = them.read_reply(ours.replies(out)[0])
    assert kind == "OOPS"


async def test_our_invoice_is_read_by_their_exchange_and_their_pay_settles_it(ours: Ours) -> None:
    ex = them.Exchange()
    invoice = Invoice(
        id="inv_w1", amount=9, token=k.TOKEN, chain=k.CHAIN, wallet=k.WORKER_WALLET, note="hours"
    )
    sent = await ours.worker.send(invoice, ex.inbox)
    raw_inv = compose(sent.outbound)
    assert ex.handle(raw_inv) == [] and ex.operator == [f"INVOICE from {k.WORKER}: 9 {k.TOKEN}"]
    # The operator answers in the thread with a PAY (the prompt in exchange/inbound.py:39).
    ours.rail.txs["tx_w1"] = k.Tx(k.WORKER_WALLET, k.TOKEN, 9)
    pay = {
        "v": "0.1.0",
        "type": "pay",
        "id": "pay_w1",
        "amount": "9",
        "token": k.TOKEN,
        "chain": k.CHAIN,
        "proof": {"tx": "tx_w1"},
        "invoice_ref": "inv_w1",
    }
    out = await ours.worker.handle(them.reply(them.receive(raw_inv), ex.inbox, "PAY | settled", pay))
    assert (out.status, out.state, out.flow_id) == ("processed", "paid", sent.flow_id)


def k_outbound(message: Message) -> Any:
    from envelopay.protocol.outbound import Outbound

    assert json.loads(message_json(message))
    return Outbound(k.BUYER, "axiomatic@agentmail.test", message, "<n1@client.test>", k.T0)
