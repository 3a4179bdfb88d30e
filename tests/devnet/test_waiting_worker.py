"""The worker that waits, with real components: the Solana dev node over JSON-RPC on a
slot clock the test advances itself (so "not final yet" is certain, not a race), the
garden on a Unix socket, SQLite ledgers, DKIM through the devnet's table, and configs
written by `init --devnet`.

- A PAY sent the moment its transaction is submitted gets FULFILL once the transaction
  is confirmed, with no OOPS in between; meanwhile the PAY waits in the ledger.
- The same when the worker is stopped while it waits and another worker process (a new
  worker id, the same ledger) takes over.
- With the chain's node stopped past the window, the OOPS comes out and the proof is
  released.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests._devnet import LocalDevnet, local_devnet

from envelopay.client.buyer import ClientApp, follow, pay_first
from envelopay.config import config_from_dict, load_config
from envelopay.engine import Outcome
from envelopay.ledger.store import ProofKey
from envelopay.node.agent_node import AgentNode, build_node
from envelopay.protocol.messages import Fulfill, Invoice, Oops, Order, Pay

WORKER, BUYER = "worker@garden.local", "buyer@garden.local"
CONFIRMED_AFTER = 3


class World(LocalDevnet):
    def tick(self, slots: int = 1) -> None:
        for _ in range(slots):
            self.clock.tick()

    def config(self, who: str, **overrides: Any) -> Any:
        import tomllib

        path = self.dirs[who] / "envelopay.toml"
        data = tomllib.loads(path.read_text())
        for section, values in overrides.items():
            data.setdefault(section, {}).update(values)
        return config_from_dict(data, base_dir=path.parent)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with local_devnet(tmp_path, (WORKER, BUYER), (WORKER, BUYER), confirmed_after=CONFIRMED_AFTER,
                            finalized_after=6) as d:
        yield World(d.home, d.state, d.clock, d.solana, d.garden, d.dirs)


@contextlib.asynccontextmanager
async def serving(node: AgentNode) -> AsyncIterator[AgentNode]:
    stop = asyncio.Event()
    task = asyncio.create_task(node.serve(stop))
    try:
        yield node
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
        await node.close()
        node.store.close()


async def until(predicate: Any, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def outcomes_of(node: AgentNode, message_id: str) -> list[Outcome]:
    return [o for o in node.outcomes if o.message_id == message_id]


async def invoice_from(buyer: AgentNode) -> tuple[Any, Invoice]:
    order = Order(id="ord_wait1", task={"name": "word_count", "text": "wait for it"})
    sent = await buyer.send(order, WORKER)
    answer = await follow(buyer, sent, timeout=30)
    assert isinstance(answer.message, Invoice), answer
    return sent, answer.message


async def pay_at_once(buyer: AgentNode, sent: Any, invoice: Invoice) -> tuple[dict[str, Any], Any]:
    """Pay and send the PAY as soon as the node took the transaction (no final wait)."""
    proof = await pay_first(buyer, chain=invoice.chain, token=invoice.token, amount=invoice.amount,
                            recipient=invoice.wallet, final_wait=0)
    pay = Pay(id="pay_wait1", amount=invoice.amount, token=invoice.token, chain=invoice.chain, proof=proof,
              invoice_ref=invoice.id)
    return proof, await buyer.send(pay, WORKER, flow_id=sent.flow_id)


@contextlib.asynccontextmanager
async def buyer_node(world: World) -> AsyncIterator[AgentNode]:
    """The buyer's node; `follow` runs its pump while it waits for an answer."""
    cfg = world.config(BUYER)
    raw = cfg.rails["solana"] | {"confirm_timeout": 0}
    cfg = cfg.model_copy(update={"rails": {**cfg.rails, "solana": raw}})
    node = build_node(cfg, app=ClientApp({(a.chain, a.token): a.wallet for a in cfg.accept}))
    try:
        yield node
    finally:
        await node.close()
        node.store.close()


async def test_pay_sent_at_submission_waits_then_fulfills(world: World) -> None:
    worker = build_node(load_config(world.dirs[WORKER] / "envelopay.toml"))
    async with serving(worker), buyer_node(world) as buyer:
        sent, invoice = await invoice_from(buyer)
        proof, paid = await pay_at_once(buyer, sent, invoice)
        assert world.clock.chain.lookup(proof["tx"])[1] == "processed"
        following = asyncio.create_task(follow(buyer, paid, timeout=60))
        await until(lambda: any(o.status == "waiting" for o in outcomes_of(worker, paid.message_id)),
                    "the worker to park the PAY")
        assert worker.store.proof_status(ProofKey("solana-local", proof["tx"])) == "held"
        assert not following.done()  # no answer while it waits
        looks = len(outcomes_of(worker, paid.message_id))
        await until(lambda: len(outcomes_of(worker, paid.message_id)) > looks, "a second look")
        world.tick(CONFIRMED_AFTER)  # now the transaction is confirmed
        answer = await following
        assert isinstance(answer.message, Fulfill), answer
        statuses = [o.status for o in outcomes_of(worker, paid.message_id)]
        assert set(statuses[:-1]) == {"waiting"} and statuses[-1] == "processed"
        flow = worker.store.flow_for_message(WORKER, paid.message_id)
        assert flow is not None and flow.state == "fulfilled"
        assert all(e.oops is None and e.type != "oops" for e in worker.store.flow_log(flow.flow_id))
        assert worker.store.proof_status(ProofKey("solana-local", proof["tx"])) == "spent"


async def test_a_new_worker_takes_over_a_waiting_pay(world: World) -> None:
    first = build_node(load_config(world.dirs[WORKER] / "envelopay.toml"))
    async with buyer_node(world) as buyer:
        async with serving(first):
            sent, invoice = await invoice_from(buyer)
            _, paid = await pay_at_once(buyer, sent, invoice)
            await until(lambda: any(o.status == "waiting" for o in outcomes_of(first, paid.message_id)),
                        "the first worker to park the PAY")
        # The first worker is gone (its pump stopped mid-wait). The PAY is only in its ledger.
        following = asyncio.create_task(follow(buyer, paid, timeout=60))
        world.tick(CONFIRMED_AFTER)
        second = build_node(load_config(world.dirs[WORKER] / "envelopay.toml"))
        assert second.engine.worker_id != first.engine.worker_id
        async with serving(second):
            answer = await following
    assert isinstance(answer.message, Fulfill), answer
    assert [o.status for o in outcomes_of(second, paid.message_id)][-1] == "processed"


async def test_node_down_past_the_window_gives_the_oops_and_releases_the_proof(world: World) -> None:
    cfg = world.config(WORKER, wait={"window_solana": 1.5})
    worker = build_node(cfg)
    async with serving(worker), buyer_node(world) as buyer:
        sent, invoice = await invoice_from(buyer)
        proof, paid = await pay_at_once(buyer, sent, invoice)
        await world.solana.stop()  # the chain cannot be asked any more
        answer = await follow(buyer, paid, timeout=60)
        assert isinstance(answer.message, Oops), answer
        assert answer.message.error is not None and answer.message.error.code == "rail_unavailable"
        statuses = [o.status for o in outcomes_of(worker, paid.message_id)]
        assert "waiting" in statuses and statuses[-1] == "refused"
        assert worker.store.proof_status(ProofKey("solana-local", proof["tx"])) is None  # released


async def _worker_process(world: World) -> asyncio.subprocess.Process:
    import sys

    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envelopay.cli", "worker", "serve", "-c", "envelopay.toml",
        cwd=world.dirs[WORKER], stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)


async def test_a_worker_process_killed_while_it_waits_restarts_and_fulfills(world: World) -> None:
    """SIGKILL of a real `worker serve` process with the PAY parked in its ledger; a new
    process on the same ledger serves it once the chain confirms: FULFILL, no OOPS."""
    from envelopay.ledger.sqlite import SqliteStore
    from envelopay.ledger.waiting import WaitingStore

    cfg_path = world.dirs[WORKER] / "envelopay.toml"
    # Looks spaced out to seconds (5 s cap): the kill below lands right after a look was
    # parked, never inside one (a look killed mid-way holds its claim for the lease).
    cfg_path.write_text(cfg_path.read_text().replace("[wait]\n", "[wait]\ncap_solana = 5\n", 1))
    assert "cap_solana = 5" in cfg_path.read_text()
    ledger = load_config(cfg_path).agent.ledger
    first = await _worker_process(world)
    try:
        async with buyer_node(world) as buyer:
            sent, invoice = await invoice_from(buyer)
            proof, paid = await pay_at_once(buyer, sent, invoice)
            view = SqliteStore(world.dirs[WORKER] / ledger)
            try:
                assert isinstance(view, WaitingStore)
                def attempts() -> int:
                    d = view.waiting_get(WORKER, paid.message_id)
                    return d.attempts if d is not None else 0

                await until(lambda: attempts() >= 6, "the worker to park the PAY and look again", 60)
                seen = attempts()
                await until(lambda: attempts() > seen, "the next look, parked again", 60)
                first.kill()  # SIGKILL, mid-wait (the next look is >= 1.6 s away)
                await first.wait()
                following = asyncio.create_task(follow(buyer, paid, timeout=60))
                world.tick(CONFIRMED_AFTER)
                second = await _worker_process(world)
                try:
                    answer = await following
                finally:
                    second.terminate()
                    await second.wait()
                assert isinstance(answer.message, Fulfill), answer
                flow = view.flow_for_message(WORKER, paid.message_id)
                assert flow is not None and flow.state == "fulfilled"
                assert all(e.oops is None and e.type != "oops" for e in view.flow_log(flow.flow_id))
                assert view.proof_status(ProofKey("solana-local", proof["tx"])) == "spent"
                assert view.waiting_count(WORKER) == 0
            finally:
                view.close()
    finally:
        if first.returncode is None:
            first.kill()
            await first.wait()
