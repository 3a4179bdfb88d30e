"""What the engine tests share: the worker engine most of them drive over the rails
mock kit (envelopay.testing.mock_rail), and a prepaid ORDER."""

from __future__ import annotations

from typing import Any

from envelopay.engine import Engine
from envelopay.ledger.store import Store
from envelopay.protocol.messages import Order
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


def worker(store: Store, rail: k.DictRail, prefix: str | None = "w", **kw: Any) -> Engine:
    """k.WORKER at garden.test on `rail` (chain k.CHAIN), the reference WorkerApp over
    that rail unless `app=` is given, the test clock; ids counted from `prefix` (None:
    random ids, as a live engine). Other Engine options pass through."""
    if prefix is not None:
        kw.setdefault("id_factory", k.counter_ids(prefix))
    if "app" not in kw:
        kw["app"] = WorkerApp(rail)
    return Engine(
        store, address=k.WORKER, domain="garden.test", rails={k.CHAIN: rail}, clock=k.Clock(), **kw
    )


def prepaid(oid: str, tx: str, amount: int = k.PRICE) -> Order:
    """A v0.2 prepaid ORDER of the echo task, paid by the test rail's transaction `tx`."""
    return Order(
        v="0.2.0", id=oid, task={"op": "echo"}, amount=amount, token=k.TOKEN, chain=k.CHAIN, proof={"tx": tx}
    )
