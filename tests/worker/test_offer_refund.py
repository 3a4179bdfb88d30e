"""An OFFER's give leg goes back when the worker will not or cannot pay the counter-leg
(issue 31 item 3), through the real path (garden, DKIM, LiteSVM and eth-tester, the worker's
ledger on SQLite and on PostgreSQL): refused after the give leg verified — the rate asked
is above the pair's, or the worker's wallet is short of the want asset — the give leg is
refunded in full, once, and the OOPS carries the refund; the buyer's exchange flow is
`refunded`. A redelivered OFFER, a redo of the step and a new OFFER citing the same give
proof pay nothing twice. A counter-leg the spend enforcer refuses is refunded the same way;
a counter-leg in doubt (its payment started and never recorded, the enforcer out of reach)
is not: it may have paid."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envelopay import dkim
from envelopay.client.buyer import Answer
from envelopay.client.commands import ClientRun
from envelopay.client.demo import BUYER, DOMAIN, WORKER, DemoWorld
from envelopay.client.report import client_report
from envelopay.config import ExchangePair, WorkerConfig
from envelopay.enforcer.client.enforced_payer import EnforcedPayer
from envelopay.enforcer.send.backends import SqliteStore as EnforcerStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.engine import BaseApplication, Context, Engine
from envelopay.engine.outcome import Outcome
from envelopay.flows import FlowKind
from envelopay.ledger.sqlite import SqliteStore
from envelopay.mail.garden import deliver
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.compose import compose_message
from envelopay.protocol.messages import Give, Message, Offer, Oops, OopsError, Want, Which
from envelopay.rails.interface import Expectation
from envelopay.worker.app import WorkerApplication
from envelopay.worker.refunds import refunder_for
from envelopay_base.custody import BasePayer
from envelopay_base.rail import make_rail

SOL, USDC = 10**9, 10**6
# Each give leg, the pair it is offered under, and the want each refusal asks: over the
# pair's rate, or within it but more than the worker's wallet holds.
GIVE = {
    # The demo's pair: 1 SOL buys at most 30 USDC (at most 100 per OFFER); the worker's
    # Base wallet is emptied for `short`.
    "solana-local": ("SOL", SOL, "base-local", "USDC", {"rate": 31 * USDC, "short": 30 * USDC}),
    # Ours: 1 USDC buys at most 1 SOL; the worker holds 2 SOL.
    "base-local": ("USDC", 5 * USDC, "solana-local", "SOL", {"rate": 6 * SOL, "short": 5 * SOL}),
}
BUYER_WALLET = {"solana-local": "buyer_sol", "base-local": "buyer_base"}


class OfferWorld(DemoWorld):
    """The demo world whose worker also trades Base USDC for Solana SOL, its ledger where
    the test says."""

    def __init__(self, workdir: Path, ledger: str | None) -> None:
        super().__init__(workdir, None)
        self.ledger = ledger

    def _configs(self, records: dict[str, str], port: int | None) -> tuple[WorkerConfig, WorkerConfig]:
        worker, buyer = super()._configs(records, port)
        pair = ExchangePair(give="base-local/USDC", want="solana-local/SOL", give_unit=str(USDC),
                            want_per_unit=str(SOL))
        agent = worker.agent
        if self.ledger is not None:
            agent = agent.model_copy(update={"ledger": self.ledger})
        return worker.model_copy(update={"agent": agent, "exchange": [*worker.exchange, pair]}), buyer


@pytest.fixture(params=["sqlite", "postgres"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OfferWorld]:
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None
    w = OfferWorld(tmp_path, dsn)
    await w.setup()
    try:
        app = w.worker.engine.app
        assert isinstance(app, WorkerApplication)
        rails = w.worker.engine.rails
        keys = {r.name: _key(r) for r in rails.values()}
        app.refunder = refunder_for(w.worker.store, rails=rails, keys=keys, owner="worker")
        yield w
    finally:
        await w.teardown()


def _key(rail: Any) -> bytes:
    """The worker's own rail key, as its config's keypair file holds it."""
    kp = getattr(rail, "keypair", None)
    return bytes(kp) if kp is not None else bytes(rail._key)


def _app(w: OfferWorld) -> WorkerApplication:
    app = w.worker.engine.app
    assert isinstance(app, WorkerApplication)
    return app


def _held(w: OfferWorld, chain: str, token: str, who: str) -> int:
    """`who`'s balance of the give asset (SOL in lamports, USDC in its units)."""
    address = w.wallets[who]
    if token == "SOL":
        chain_world: Any = w.sol  # the LiteSVM under the dev chain: native balances
        return int(chain_world.sol.balance(address))
    world = w.sol if chain.startswith("solana") else w.base
    return world.usdc_balance(address) or 0


async def _offer(w: OfferWorld, chain: str, oid: str, want_amount: int) -> Offer:
    token, amount, want_chain, want_token, _ = GIVE[chain]
    to = w.worker.engine.app.wallet(chain, token)
    assert to is not None
    proof = await w.pay(w.buyer_rails, chain, token, amount, to)
    buyer_want = w.wallets[BUYER_WALLET[want_chain]]
    return Offer(id=oid, give=Give(amount=amount, token=token, chain=chain, to=to, proof=proof),
                 want=Want(amount=want_amount, token=want_token, chain=want_chain), wallet=buyer_want)


def _refund(reply: Message | None) -> dict[str, Any] | None:
    assert isinstance(reply, Oops) and reply.error is not None, reply
    refund = (reply.error.model_extra or {}).get("refund")
    return refund if isinstance(refund, dict) else None


async def _redeliver(w: OfferWorld, offer: Offer, message_id: str) -> None:
    """The same mail (its Message-ID) delivered again, then a WHICH behind it: once the
    WHICH is answered the worker has taken the redelivery in."""
    raw, _ = compose_message(offer, sender=BUYER, recipient=WORKER, domain=DOMAIN,
                             now=datetime.now(UTC), message_id=message_id)
    signed = dkim.sign(raw, selector="buyer", domain=DOMAIN, key=w.buyer_key)
    await deliver(signed, BUYER, [WORKER], w._endpoint(), auth=(BUYER, w.secrets[BUYER]))
    await w.exchange(Which(id=f"w-after-{offer.id}"))


async def _redo(w: OfferWorld, offer: Offer, flow_id: str) -> Any:
    """The engine's redo of the step after a crash before its commit: the application asked
    again, with the give leg's verdict as the rail gives it."""
    g = offer.give
    verdict = await w.worker.engine.rails[g.chain].verify(
        g.proof, Expectation(chain=g.chain, token=g.token, amount=g.amount, recipient=g.to))
    assert verdict.ok
    ctx = Context(local=WORKER, peer=BUYER, flow_id=flow_id, kind=FlowKind.EXCHANGE, state="offered",
                  data={}, now=datetime.now(UTC), new_id=lambda p: f"{p}_redo", verdict=verdict)
    return await _app(w).offer(offer, ctx)


@pytest.mark.parametrize("why", ["rate", "short"])
@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_a_refused_offer_gives_its_give_leg_back_once(world: OfferWorld, chain: str, why: str) -> None:
    w = world
    token, amount, want_chain, want_token, wants = GIVE[chain]
    if why == "short" and want_chain == "base-local":  # the worker's USDC goes elsewhere
        left = w.base.usdc_balance(w.wallets["worker_base"]) or 0
        await w.worker.engine.rails["base-local"].pay(chain="base-local", token="USDC", amount=left,
                                                      recipient=w.base.new_wallet().address)
    who = BUYER_WALLET[chain]
    before = _held(w, chain, token, who)
    offer = await _offer(w, chain, f"of-{why}", wants[why])
    paid = _held(w, chain, token, who)
    assert paid < before - amount + 1  # the give leg left the buyer's wallet (and a fee, for SOL)
    out, reply, bflow = await w.exchange(offer)
    code = "amount_mismatch" if why == "rate" else "insufficient_funds"
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == code
    refund = _refund(reply)
    assert refund is not None and refund["status"] == "paid" and refund["proof"]
    assert refund["amount"] == str(amount) and refund["chain"] == chain and refund["token"] == token
    assert refund["wallet"].lower() == w.wallets[who].lower() and refund["reason"] == "offer_refused"
    assert "went back" in (reply.note or "")
    assert _held(w, chain, token, who) == paid + amount  # all of it back, once
    rec = w.buyer.store.get_flow(bflow)
    assert rec is not None and rec.state == "refunded" and rec.data["refund"]["verified"] is True
    ours = w.worker.store.get_flow(out.flow_id or "")  # the worker's show FLOW lists it too
    assert ours is not None and ours.data["refund"]["proof"] == refund["proof"]

    # Nothing is paid twice: the same mail again, the step redone, the proof in a new OFFER.
    assert out.message_id is not None
    await _redeliver(w, offer, out.message_id)
    # The redo comes after the worker's wallet was filled again: the counter-leg it could now
    # pay is never paid on top of the give leg that went back.
    if want_chain == "base-local":
        w.base.fund(w.wallets["worker_base"], usdc=100 * USDC)
    else:
        w.sol.fund(w.wallets["worker_sol"], native=10 * SOL)
    wanted = _held(w, want_chain, want_token, BUYER_WALLET[want_chain])
    redo = await _redo(w, offer, out.flow_id or "")
    assert redo.extra["refund"]["proof"] == refund["proof"]  # the recorded refund, not a new one
    assert _held(w, want_chain, want_token, BUYER_WALLET[want_chain]) == wanted
    _, again, _ = await w.exchange(offer.model_copy(update={"id": f"of-{why}-again"}))
    assert isinstance(again, Oops) and _refund(again) is None
    assert _held(w, chain, token, who) == paid + amount


@pytest.mark.parametrize("chain", ["solana-local", "base-local"])
async def test_a_counter_leg_in_doubt_keeps_the_give_leg_for_the_operator(
    world: OfferWorld, chain: str
) -> None:
    w = world
    token, _, _, _, wants = GIVE[chain]
    offer = await _offer(w, chain, "of-doubt", wants["short"] // 5)  # within the rate and the wallet
    book = _app(w).app.counterpayments
    assert book is not None
    assert book.begin(BUYER, offer.id) == ("new", None)  # a payment started and never recorded
    who = BUYER_WALLET[chain]
    paid = _held(w, chain, token, who)
    _, reply, bflow = await w.exchange(offer)
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == "rail_unavailable"
    assert _refund(reply) is None and "operator" in (reply.note or "")
    assert _held(w, chain, token, who) == paid  # the give leg stays with the worker
    assert w.buyer.store.get_flow(bflow).state == "refused"  # type: ignore[union-attr]


async def _enforcer(w: OfferWorld, tmp_path: Path) -> tuple[Any, str, str, EnforcerStore]:
    """A spend enforcer whose worker agent holds no wallet on Base: it refuses every
    counter-leg there (`blocked`, nothing moved)."""
    store = EnforcerStore(tmp_path / "enf.db")
    await store.open()
    enforcer = Enforcer(store, GardenTransport(tmp_path / "none.sock", reuse=False))
    pstore = PaymentStore(store)
    await pstore.open()
    payer = BasePayer(make_rail({**w.base.rail_options(), "backend": "local", "confirm_timeout": 5,
                                 "poll_interval": 0.01}))
    payments = Payments(enforcer, pstore, Vault(b"test-vault-secret-0123456789abcdef"), {"base-local": payer})
    _, token = await enforcer.create_agent("worker", WORKER)
    runner, url = await start_server(enforcer, payments=payments)
    return runner, url, token, store


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("enforcer", ["refuses", "unreachable"])
async def test_a_counter_leg_through_the_enforcer_refused_refunds_and_one_out_of_reach_does_not(
    world: OfferWorld, tmp_path: Path, enforcer: str
) -> None:
    w = world
    runner = store = None
    if enforcer == "refuses":
        runner, url, token, store = await _enforcer(w, tmp_path)
    else:  # the line to the enforcer is down: it may have paid before it went
        url, token = f"http://127.0.0.1:{_closed_port()}", "epa_unknown"
    try:
        _app(w).app.counter_payer = EnforcedPayer(url, token, timeout=5)
        paid_before = _held(w, "solana-local", "SOL", "buyer_sol")
        offer = await _offer(w, "solana-local", f"of-enf-{enforcer}", 30 * USDC)  # within the rate
        paid = _held(w, "solana-local", "SOL", "buyer_sol")
        assert paid < paid_before - SOL + 1
        _, reply, bflow = await w.exchange(offer)
        assert isinstance(reply, Oops) and reply.error is not None
        rec = w.buyer.store.get_flow(bflow)
        assert rec is not None
        if enforcer == "refuses":
            refund = _refund(reply)
            assert refund is not None and refund["status"] == "paid" and refund["amount"] == str(SOL)
            assert _held(w, "solana-local", "SOL", "buyer_sol") == paid + SOL
            assert rec.state == "refunded"
        else:
            assert _refund(reply) is None and "operator" in (reply.note or "")
            assert _held(w, "solana-local", "SOL", "buyer_sol") == paid  # stays with the worker
            assert rec.state == "refused"
        assert (w.base.usdc_balance(w.wallets["buyer_base"]) or 0) == w.buyer_usdc  # no counter-leg
    finally:
        if runner is not None:
            await runner.cleanup()
        if store is not None:
            await store.close()


async def test_the_buyers_summary_says_the_offer_was_refused_and_its_give_leg_went_back(
    tmp_path: Path,
) -> None:
    store = SqliteStore(str(tmp_path / "client.db"))
    store.migrate()
    try:
        engine = Engine(store, address=BUYER, domain=DOMAIN, rails={}, app=BaseApplication())
        offer = Offer(id="of-sum", give=Give(amount=SOL, token="SOL", chain="solana-local", to="W1",
                                             proof={"tx": "t1"}),
                      want=Want(amount=USDC, token="USDC", chain="base-local"), wallet="0xB")
        sent = await engine.send(offer, WORKER)
    finally:
        store.close()
    oops = Oops(id="oops_s", ref="of-sum", note="amount_mismatch", error=OopsError(code="amount_mismatch"))
    answer = Answer(message=oops, outcome=Outcome(status="processed", flow_id=sent.flow_id, state="refunded"))
    lines = client_report("offer", ClientRun("OFFER", sent, answer=answer), timeout=5).lines
    assert any("the OFFER was refused and the payment above was refunded" in line for line in lines)
    assert not any("the work failed" in line for line in lines)


async def test_a_give_leg_that_cannot_be_paid_back_is_said_so_and_left_for_the_operator(
    world: OfferWorld,
) -> None:
    w = world
    rails = w.worker.engine.rails
    broke = w.base.new_wallet()  # the refund's key holds neither ETH nor USDC on Base
    keys = {r.name: _key(r) for r in rails.values()}
    keys[rails["base-local"].name] = broke.key
    _app(w).refunder = refunder_for(w.worker.store, rails=rails, keys=keys, owner="worker")
    token, amount, _, _, wants = GIVE["base-local"]
    offer = await _offer(w, "base-local", "of-broke", wants["rate"])
    paid = _held(w, "base-local", token, "buyer_base")
    _, reply, bflow = await w.exchange(offer)
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == "amount_mismatch"
    refund = (reply.error.model_extra or {})["refund"]
    assert refund["status"] == "failed" and "proof" not in refund and refund["amount"] == str(amount)
    assert "could not be paid back" in (reply.note or "")
    assert _held(w, "base-local", token, "buyer_base") == paid  # nothing moved
    rec = w.buyer.store.get_flow(bflow)
    assert rec is not None and rec.state == "refused"  # no proof: the plain OOPS it also is


async def test_a_counter_leg_whose_rail_lost_its_node_mid_payment_is_in_doubt_and_never_paid_twice(
    world: OfferWorld,
) -> None:
    w = world
    real = _app(w).app.rails["base-local"]
    base_world: Any = w.base  # the eth-tester chain under the dev chain: its chain id
    # The worker's own Base key, its node gone (a closed port): the payment may or may not
    # have left, as far as the worker can tell.
    _app(w).app.rails["base-local"] = make_rail({
        "backend": "rpc", "rpc_url": f"http://127.0.0.1:{_closed_port()}", "network": "local",
        "chain_id": base_world.base.chain_id, "keypair": _key(real), "confirm_timeout": 1})
    offer = await _offer(w, "solana-local", "of-lost", 30 * USDC)
    paid = _held(w, "solana-local", "SOL", "buyer_sol")
    got = w.base.usdc_balance(w.wallets["buyer_base"])
    out, reply, _ = await w.exchange(offer)
    assert isinstance(reply, Oops) and reply.error is not None and reply.error.code == "rail_unavailable"
    assert _refund(reply) is None and "operator" in (reply.note or "")
    assert _held(w, "solana-local", "SOL", "buyer_sol") == paid  # the give leg stays
    # Asked again (a redo after a crash) with the node back: still in doubt, nothing paid.
    _app(w).app.rails["base-local"] = real
    redo = await _redo(w, offer, out.flow_id or "")
    assert redo.code.value == "rail_unavailable" and redo.extra is None
    assert w.base.usdc_balance(w.wallets["buyer_base"]) == got
    assert _held(w, "solana-local", "SOL", "buyer_sol") == paid
