"""Many flows at once through the real garden to a served worker whose Maildir serves
several messages at once (node/runtime.py `pump`), over SQLite and PostgreSQL.

The engine is built for several workers on one ledger (claims on Message-IDs, flow
versions with conflict retries); a pump that serves 8 messages at once puts that to
work inside one process: every flow must still end right, each answered once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envelopay.engine import Engine
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.node.agent_node import AgentNode
from envelopay.protocol.messages import Fulfill, Invoice, Methods, Order, Which
from envelopay.protocol.parse import parse
from envelopay.protocol.parsed import Parsed
from envelopay.rails.interface import Expectation, Verdict
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

KINDS = ["invoiced"] * 12 + ["prepaid"] * 4 + ["free"] * 4 + ["which"] * 4


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        s: Store = SqliteStore(tmp_path / "ledger.db")
    else:
        s = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=4)
    yield s
    s.close()


class SlowChain(k.DictRail):
    """The mock chain, answering each verification after a JSON-RPC-like pause, so the
    steps of different flows overlap inside the worker."""

    def __init__(self) -> None:
        super().__init__()
        self._rng = random.Random(31)
        self.verifying = 0
        self.most_at_once = 0  # the verifications in flight at one time, at most
        self._met = asyncio.Event()  # two were in flight at once

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        self.verifying += 1
        self.most_at_once = max(self.most_at_once, self.verifying)
        if self.most_at_once > 1:
            self._met.set()
        try:
            if not self._met.is_set():  # until two overlap, give a second one time to start beside it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._met.wait(), 0.5)
            await asyncio.sleep(self._rng.uniform(0.005, 0.04))
        finally:
            self.verifying -= 1
        return await super().verify(proof, expectation)


class Buyer:
    """One flow's buyer: its own garden address, so what it receives is that flow's."""

    def __init__(self, garden: GardenServer, transport: GardenTransport, chain: SlowChain, n: int) -> None:
        self.address = f"buyer{n}@garden.test"
        self.garden, self.transport, self.chain, self.n = garden, transport, chain, n
        self.received: list[Parsed] = []

    async def send(self, raw: bytes) -> None:
        await self.transport.send(raw, self.address, k.WORKER)

    async def next_mail(self) -> Parsed:
        box = self.garden.maildir(self.address) / "new"
        async with asyncio.timeout(30):
            while True:
                files = sorted(box.iterdir(), key=lambda p: p.stat().st_mtime_ns) if box.exists() else []
                if files:
                    parsed = parse(files[0].read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n"))
                    files[0].unlink()
                    self.received.append(parsed)
                    return parsed
                await asyncio.sleep(0.01)

    def mail(self, message: Any, mid: str, **kw: Any) -> bytes:
        return k.raw(message, sender=self.address, message_id=mid, **kw)

    async def flow(self, kind: str) -> None:
        oid, order_mid = f"ord{self.n}", f"<ord{self.n}@garden.test>"
        if kind == "which":
            await self.send(self.mail(Which(id=f"wh{self.n}"), f"<wh{self.n}@garden.test>"))
        elif kind == "free":
            await self.send(self.mail(k.order(oid, op="free"), order_mid))
        elif kind == "prepaid":
            tx, wallet = f"tx-pre-{self.n}", f"W-b{self.n}"
            self.chain.txs[tx] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, payer=wallet)
            order = Order(v="0.2.0", id=oid, task={"op": "echo"}, amount=k.PRICE, token=k.TOKEN,
                          chain=k.CHAIN, proof={"tx": tx})
            await self.send(self.mail(k.bind(order, wallet=wallet, sender=self.address), order_mid))
        else:
            await self.send(self.mail(k.order(oid), order_mid))
            invoice = await self.next_mail()
            inv = invoice.message
            assert isinstance(inv, Invoice) and inv.order_ref == oid
            tx = f"tx-{self.n}"
            self.chain.txs[tx] = k.Tx(inv.wallet, inv.token, int(inv.amount), payer=f"W-b{self.n}")
            pay = k.pay(f"pay{self.n}", tx, amount=int(inv.amount), invoice_ref=inv.id)
            assert invoice.message_id is not None
            await self.send(self.mail(pay, f"<pay{self.n}@garden.test>", in_reply_to=invoice.message_id,
                                      references=(order_mid, invoice.message_id)))
        answer = await self.next_mail()
        if kind == "which":
            assert isinstance(answer.message, Methods), answer.message
        else:
            assert isinstance(answer.message, Fulfill) and answer.message.order_ref == oid, answer.message


async def test_many_interleaved_flows_served_at_once_each_end_right_answered_once(
    store: Store, tmp_path: Path
) -> None:
    buyers_n = len(KINDS)
    addresses = [k.WORKER, *(f"buyer{n}@garden.test" for n in range(buyers_n))]
    async with GardenServer(tmp_path / "garden", addresses, open_garden=True, fsync=False) as garden:
        transport = GardenTransport(garden.endpoint)
        chain = SlowChain()
        app = WorkerApp(chain)
        engine = Engine(store, address=k.WORKER, domain="garden.test", rails={k.CHAIN: chain}, app=app,
                        clock=k.Clock())
        drainer = OutboxDrainer(store, DirectHook(transport), clock=engine.clock, owner=engine.worker_id)
        node = AgentNode(engine, drainer, None, maildir=garden.maildir(k.WORKER), transport=transport)
        stop = asyncio.Event()
        serving = asyncio.create_task(node.serve(stop, concurrency=8))
        try:
            buyers = [Buyer(garden, transport, chain, n) for n in range(buyers_n)]
            kinds = list(KINDS)
            random.Random(5).shuffle(kinds)
            flows = (b.flow(kind) for b, kind in zip(buyers, kinds, strict=True))
            await asyncio.wait_for(asyncio.gather(*flows), 60)
            await asyncio.sleep(0.5)  # anything sent twice would land by now
        finally:
            stop.set()
            await asyncio.wait_for(serving, 30)
            await transport.close()
        for b, kind in zip(buyers, kinds, strict=True):
            box = garden.maildir(b.address) / "new"
            assert not list(box.iterdir()), f"{b.address} ({kind}) got more mail than its answers"
            assert len(b.received) == (2 if kind == "invoiced" else 1)
    # Every paid or free ORDER fulfilled exactly once; each message handled, none refused.
    orders = Counter(app.fulfilled)
    assert orders == Counter(f"ord{n}" for n, kind in enumerate(kinds) if kind != "which")
    statuses = Counter(o.status for o in node.outcomes)
    assert statuses == Counter({"processed": len(KINDS) + KINDS.count("invoiced")}), statuses
    assert 1 < chain.most_at_once <= 8  # the steps did overlap, within the pump's width
