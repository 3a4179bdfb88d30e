"""What a watched node reports per message (node/observe.py `Handled`), built from values
the engine hands back (its parse, the Outcome's rail timings), with no context variable:
each rail verification timed, the money a processed step brought, a redelivery bringing
none, and concurrent receives never seeing each other's facts."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from tests._engines import prepaid, worker

from envelopay.engine import Outcome
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.store import Store
from envelopay.node.agent_node import AgentNode
from envelopay.node.metrics import WorkerMetrics
from envelopay.node.observe import Handled, Received
from envelopay.protocol.messages import Which
from envelopay.rails.interface import Expectation, Verdict
from envelopay.testing import MockTransport
from envelopay.testing import mock_rail as k

PAUSE = 0.02  # how long the test rail's verification takes, at least


class PausedRail(k.DictRail):
    """The test rail, each verification a pause long (a chain's round trip); with `meet`,
    the verifications wait until that many are in flight at once."""

    def __init__(self, txs: dict[str, k.Tx], meet: int = 1) -> None:
        super().__init__(txs)
        self.meet = meet
        self.in_flight = 0
        self.met = asyncio.Event()

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        self.in_flight += 1
        if self.in_flight >= self.meet:
            self.met.set()
        await asyncio.wait_for(self.met.wait(), 5)
        await asyncio.sleep(PAUSE)
        self.in_flight -= 1
        return await super().verify(proof, expectation)


def watched(store: Store, rail: k.DictRail) -> tuple[AgentNode, list[Handled]]:
    seen: list[Handled] = []
    transport = MockTransport()
    drainer = OutboxDrainer(store, DirectHook(transport))
    node = AgentNode(worker(store, rail), drainer, None, transport=transport)
    node.watch(seen.append)
    return node, seen


def paid_order(oid: str, tx: str, sender: str = k.BUYER) -> bytes:
    bound = k.bind(prepaid(oid, tx), sender=sender.lower())  # the statement names the sender as acted on
    return k.raw(bound, sender=sender, message_id=f"<{oid}@client.test>")


async def test_a_paid_order_reports_its_type_sender_proof_timing_and_money(store: Store) -> None:
    rail = PausedRail({"tx1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    node, seen = watched(store, rail)
    outcome = await node.receive(paid_order("ord_o1", "tx1", sender="Buyer@Client.test"))
    assert (outcome.status, outcome.state) == ("processed", "fulfilled")
    (got,) = seen
    assert (got.type, got.sender, got.outcome) == ("order", "buyer@client.test", outcome)
    assert got.dkim_seconds is None  # no DNS: no DKIM check ran
    assert got.received == Received(k.CHAIN, k.TOKEN, k.PRICE)
    ((chain, seconds),) = got.proofs
    assert chain == k.CHAIN and PAUSE <= seconds <= got.seconds
    assert got.proofs == outcome.verify_seconds


async def test_the_metrics_count_each_verification_and_the_money_of_a_watched_node(store: Store) -> None:
    rail = PausedRail({"tx4": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    node, _ = watched(store, rail)
    metrics = WorkerMetrics(store, k.WORKER)
    node.watch(metrics)
    await node.receive(paid_order("ord_o4", "tx4"))
    await node.receive(k.raw(Which(id="w_o4")))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.exposition().decode())
               for s in family.samples}
    proof = ("envelopay_worker_proof_verification_seconds_count", (("chain", k.CHAIN),))
    assert samples[proof] == 1  # the WHICH asked no rail
    assert samples[("envelopay_worker_proof_verification_seconds_sum", (("chain", k.CHAIN),))] >= PAUSE
    units = ("envelopay_worker_received_units_total", (("chain", k.CHAIN), ("token", k.TOKEN)))
    assert samples[units] == k.PRICE
    assert samples[("envelopay_worker_handling_seconds_count", ())] == 2


async def test_a_redelivery_reports_no_verification_and_no_money(store: Store) -> None:
    rail = PausedRail({"tx2": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    node, seen = watched(store, rail)
    raw = paid_order("ord_o2", "tx2")
    await node.receive(raw)
    again = await node.receive(raw)
    assert again.repeat == "message_id" and rail.verify_calls == 1
    first, second = seen
    assert len(first.proofs) == 1 and first.received is not None
    assert (second.type, second.proofs, second.received) == ("order", (), None)


async def test_concurrent_receives_never_see_each_others_facts(store: Store) -> None:
    """Two orders verified at the same time (the rail holds each until both are in flight)
    and a WHICH beside them: each report has its own sender, type, timings and money."""
    rail = PausedRail({"txa": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE),
                       "txb": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)}, meet=2)
    node, seen = watched(store, rail)
    which = k.raw(Which(id="w_o3"), sender="c@client.test")
    await asyncio.gather(node.receive(paid_order("ord_a", "txa", sender="a@client.test")),
                         node.receive(paid_order("ord_b", "txb", sender="b@client.test")),
                         node.receive(which))
    by_sender = {h.sender: h for h in seen}
    assert set(by_sender) == {"a@client.test", "b@client.test", "c@client.test"}
    for who in ("a@client.test", "b@client.test"):
        got = by_sender[who]
        assert got.type == "order" and got.outcome.status == "processed" and len(got.proofs) == 1
        assert got.received == Received(k.CHAIN, k.TOKEN, k.PRICE)
    assert (by_sender["c@client.test"].type, by_sender["c@client.test"].proofs) == ("which", ())


def test_the_timings_are_not_recorded_and_no_part_of_the_outcome() -> None:
    timed = Outcome("processed", "<m@x>", verify_seconds=((k.CHAIN, 0.5),))
    assert "verify_seconds" not in timed.to_json()
    assert Outcome.from_json(timed.to_json()) == timed  # equal: the timings are no part of it
    assert Outcome.from_json(timed.to_json()).verify_seconds == ()
