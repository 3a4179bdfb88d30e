"""The worker's OFFER counter-legs paid by the spend enforcer (transport.payments =
"enforcer"): the worker holds no key for them; the enforcer pays from the agent's wallet
it holds, once per OFFER, within its spend policy."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from envelopay.client.demo import WORKER, DemoWorld
from envelopay.enforcer.client.enforced_payer import EnforcedPayer
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.server import start_server
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.messages import Give, Offer, Want
from envelopay_base.custody import BasePayer
from envelopay_base.rail import make_rail


async def test_counter_legs_through_the_enforcer_pay_once_within_policy(
    demo_world: DemoWorld, tmp_path: Path
) -> None:
    from envelopay.engine import Context, Refuse
    from envelopay.flows import FlowKind

    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    enforcer = Enforcer(store, GardenTransport(tmp_path / "none.sock", reuse=False))
    pstore = PaymentStore(store)
    await pstore.open()
    payer = BasePayer(
        make_rail(
            {**demo_world.base.rail_options(), "backend": "local", "confirm_timeout": 5,
             "poll_interval": 0.01}
        )
    )
    payments = Payments(enforcer, pstore, Vault(b"test-vault-secret-0123456789abcdef"), {"base-local": payer})
    _, token = await enforcer.create_agent("worker", WORKER)
    wallet = await payments.create_wallet("worker", "base-local")
    demo_world.base.fund(wallet.address, native=10**18, usdc=100_000_000)
    await payments.set_policy(
        "worker",
        SpendPolicy(
            limits={"base-local/USDC": SpendLimit(per_payment=40_000_000, daily=50_000_000)},
            payees=("garden.local",),
        ),
    )
    runner, url = await start_server(enforcer, payments=payments)
    try:
        app = demo_world.worker.engine.app
        app.app.counter_payer = EnforcedPayer(url, token)  # what build_node does for payments = "enforcer"
        sol_wallet = demo_world.wallets["worker_sol"]
        proof = await demo_world.pay(demo_world.buyer_rails, "solana-local", "SOL", 10**9, sol_wallet)
        offer = Offer(
            id="of-enf",
            give=Give(amount=10**9, token="SOL", chain="solana-local", to=sol_wallet, proof=proof),
            want=Want(amount=30_000_000, token="USDC", chain="base-local"),
            wallet=demo_world.wallets["buyer_base"],
        )
        ctx = Context(
            local=WORKER,
            peer="buyer@garden.local",
            flow_id="f",
            kind=FlowKind.EXCHANGE,
            state="offered",
            data={},
            now=datetime.now(UTC),
            new_id=lambda p: f"{p}_x",
        )
        before = demo_world.base.usdc_balance(demo_world.wallets["buyer_base"])
        worker_before = demo_world.base.usdc_balance(demo_world.wallets["worker_base"])
        first = await app.offer(offer, ctx)
        again = await app.offer(offer, ctx)  # the engine's redo after a crash
        assert first is not None and first.type == "accept" and again == first
        assert demo_world.base.usdc_balance(demo_world.wallets["buyer_base"]) - before == 30_000_000  # once
        # Paid from the enforcer's wallet, not the worker's own key.
        assert demo_world.base.usdc_balance(demo_world.wallets["worker_base"]) == worker_before
        assert demo_world.base.usdc_balance(wallet.address) == 70_000_000
        # The daily spend cap holds the next counter-leg: refused to the peer, nothing paid.
        second = await app.offer(offer.model_copy(update={"id": "of-enf-2"}), ctx)
        assert isinstance(second, Refuse) and second.code.value == "rail_unavailable"
        assert demo_world.base.usdc_balance(demo_world.wallets["buyer_base"]) - before == 30_000_000
    finally:
        await runner.cleanup()
        await store.close()
