"""The DKIM label recorded with an outcome is the message's own (issue 28 item 3).

It used to ride from the DKIM gate to the commit in a context variable, set once the
gate was passed and never cleared: mail handled after it in the same task — prose that
never reaches the gate — was recorded with the previous message's label. Now it rides
on the message's `InboundMail`.
"""

from __future__ import annotations

from datetime import timedelta

from envelopay.dkim import DkimResult
from envelopay.engine import Engine
from envelopay.ledger.store import Store
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

PASS = DkimResult("pass", domain="client.test", aligned=True, from_domain="client.test")
PROSE = (
    b"From: person@client.test\r\nTo: worker@garden.test\r\nSubject: hello there\r\n"
    b"Message-ID: <prose.1@client.test>\r\nDate: Thu, 01 Jan 2026 00:00:00 +0000\r\n\r\njust saying hi\r\n"
)


def engine(store: Store) -> Engine:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, time=k.T0 + timedelta(hours=1))})
    return Engine(
        store,
        address=k.WORKER,
        domain="garden.test",
        rails={k.CHAIN: rail},
        app=WorkerApp(rail),
        clock=k.Clock(),
        id_factory=k.counter_ids("l"),
    )


async def test_each_outcome_carries_its_own_messages_label(store: Store) -> None:
    e = engine(store)
    signed = await e.handle(k.raw(k.order("ord_1")), dkim=PASS)
    assert (signed.status, signed.dkim) == ("processed", "pass, aligned")
    prose = await e.handle(PROSE)  # same task, no verdict, never reaches the DKIM gate
    assert prose.status == "ignored" and prose.dkim is None
    unsigned = await e.handle(k.raw(k.order("ord_2")), dkim=DkimResult("none"))
    assert (unsigned.status, unsigned.dkim) == ("processed", "none")
    recorded = store.inbound_outcome(k.WORKER, "<prose.1@client.test>")
    assert recorded is not None and "dkim" not in recorded
