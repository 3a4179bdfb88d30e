"""Poison input is answered with its OOPS code or quarantined, never left half-done
(issue 11, item 6), over SQLite and PostgreSQL.

Before: an `id` with a lone surrogate made building the OOPS raise; a `task` nested 300
deep parsed and then raised at serialization; a lone surrogate in a task was refused by
PostgreSQL's jsonb. Each raise left the Message-ID claimed and the (sender, id)
reserved, so a retransmission stayed `busy` forever.
"""

from __future__ import annotations

from typing import Any

import pytest
from tests._engines import prepaid, worker

from envelopay.engine import Engine
from envelopay.engine.outbox import OutboxDrainer, SendResult
from envelopay.ledger.store import ProofKey, Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Oops, Order
from envelopay.protocol.outbound import Outbound
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


def mail(body: str, mid: str, subject: str = "ORDER") -> bytes:
    return (
        f"From: buyer@client.test\r\nTo: worker@garden.test\r\nSubject: {subject}\r\nMessage-ID: {mid}\r\n"
        "Date: Tue, 01 Dec 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n\r\n" + body + "\r\n"
    ).encode()


NESTED = '{"op":"echo","x":' + "[" * 300 + "]" * 300 + "}"
POISON = {
    "surrogate_id": '{"v":"0.1.0","type":"order","id":"\\udcff","task":{"op":"echo"}}',
    "nested_task": '{"v":"0.1.0","type":"order","id":"ord_n","task":' + NESTED + "}",
    "surrogate_in_task": '{"v":"0.1.0","type":"order","id":"ord_s","task":{"op":"\\udcff"}}',
    "nul_in_task": '{"v":"0.1.0","type":"order","id":"ord_z","task":{"op":"a\\u0000b"}}',
    "huge_number": '{"v":"0.1.0","type":"order","id":"ord_b","task":{"n":' + "9" * 5000 + "}}",
    "surrogate_note": '{"v":"0.1.0","type":"order","id":"ord_t","task":{"op":"echo"},"note":"\\ud800"}',
}


@pytest.mark.parametrize("case", sorted(POISON))
async def test_poison_is_answered_with_its_code(store: Store, case: str) -> None:
    eng = Engine(store, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(), clock=k.Clock())
    out = await eng.handle(mail(POISON[case], "<p1@client.test>"))
    assert out.status == "refused" and out.oops in (OopsCode.INVALID_FIELD, OopsCode.INVALID_JSON), out
    sent: list[bytes] = []

    async def hook(ob: Outbound, raw: bytes) -> SendResult:
        sent.append(raw)
        return SendResult("sent")

    report = await OutboxDrainer(store, hook, clock=k.Clock()).drain()
    assert report.failed == [] and len(sent) == 1  # the OOPS composes and goes out
    row = store.outbox_get(out.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Oops)
    # The same mail again, and a retransmission under a new Message-ID: answered, never busy.
    assert (await eng.handle(mail(POISON[case], "<p1@client.test>"))).repeat == "message_id"
    again = await eng.handle(mail(POISON[case], "<p2@client.test>"))
    assert again.status == "refused"


class BuggyApp(WorkerApp):
    """An application with a bug: its ORDER decision is not a message at all."""

    async def order(self, order: Order, ctx: Any, *, paid: int | None) -> Any:
        return "not a message"


async def test_a_step_that_raises_is_quarantined_and_releases_its_proof(store: Store) -> None:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)})
    eng = worker(store, rail, None, app=BuggyApp(rail))
    order = k.bind(prepaid("ord_q", "t1"))
    out = await eng.handle(k.raw(order, message_id="<q1@client.test>"))
    assert out.status == "quarantined" and "AttributeError" in out.detail
    recorded = store.inbound_outcome(k.WORKER, "<q1@client.test>")
    assert recorded is not None and recorded["status"] == "quarantined"
    # The retransmission is answered from the record, not left busy.
    again = await eng.handle(k.raw(order, message_id="<q2@client.test>"))
    assert (again.status, again.repeat) == ("quarantined", "retransmission")
    assert store.proof_status(ProofKey(k.CHAIN, "t1")) is None  # never judged: not spent
