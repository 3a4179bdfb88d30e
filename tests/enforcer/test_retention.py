"""Enforcer retention on both stores: finished sends and past counters go, pending and
approved rows stay, caps still hold, and it runs beside live sends."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.retention import compact_enforcer
from envelopay.errors import UsageError

from .conftest import Clock, Sink

DAY = 86_400.0


def req(subject: str, to: str = "bob@partner.test") -> dict[str, Any]:
    return {"to": to, "from": "r@agents.test", "subject": subject, "text": subject}


async def _rows(store: EnforcerStore, table: str) -> int:
    return int((await store.execute_sql(f"SELECT count(*) FROM {table}", ()))[0][0])


async def test_finished_sends_and_past_counters_age_out(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    _, tok = await enforcer.create_agent("r", "r@agents.test", allow=("partner.test",), hourly=3, daily=50)
    for i in range(3):
        assert (await enforcer.send(tok, req(f"old {i}"))).status == "sent"
    flagged = await enforcer.send(tok, req("old held", to="x@other.test"))
    rejected = await enforcer.send(tok, req("old refused", to="y@other.test"))
    assert flagged.approval_id and rejected.approval_id
    await enforcer.reject(rejected.approval_id)
    assert await _rows(store, "enf_counters") == 2  # this hour, this day
    clock.now += 30 * DAY
    fresh = await enforcer.send(tok, req("fresh"))
    assert fresh.status == "sent"

    with pytest.raises(UsageError, match="longer than the duplicate window"):
        await compact_enforcer(store, older_than=60, now=clock.now)
    report = await compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=2)
    assert (report.sends, report.counters) == (4, 2)  # 3 sent + 1 rejected; last month's slots
    assert await _rows(store, "enf_counters") == 2  # today's remain
    queue = await enforcer.list_approvals()
    assert [r.id for r in queue] == [flagged.approval_id]  # pending stays, finished ones went
    assert (await enforcer.status(tok, fresh.id or "")).status == "sent"
    # Caps still count from the kept slots: 2 more this hour, then flagged.
    statuses = [(await enforcer.send(tok, req(f"now {i}"))).status for i in range(3)]
    assert statuses == ["sent", "sent", "pending_approval"]
    again = await compact_enforcer(store, older_than=7 * DAY, now=clock.now)
    assert (again.sends, again.counters) == (0, 0)


async def test_compaction_beside_live_sends(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    _, tok = await enforcer.create_agent("r", "r@agents.test", allow=("partner.test",), hourly=500, daily=500)
    for i in range(40):
        await enforcer.send(tok, req(f"old {i}"))
    clock.now += 30 * DAY

    async def live() -> list[str]:
        return [(await enforcer.send(tok, req(f"live {i}"))).status for i in range(20)]

    statuses, report = await asyncio.gather(
        live(), compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=5)
    )
    assert statuses == ["sent"] * 20 and report.sends == 40
    assert len(sink.messages) == 60
    assert await _rows(store, "enf_sends") == 20


async def test_claims_that_refuse_nothing_any_more_age_out(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    _, tok = await enforcer.create_agent("r", "r@agents.test", allow=("partner.test",), hourly=50, daily=50)
    for i in range(3):  # a fingerprint claim each
        assert (await enforcer.send(tok, req(f"old {i}"))).status == "sent"
    fixed = {**req("old fixed"), "message_id": "<fixed-1@agents.test>"}  # and a Message-ID claim
    assert (await enforcer.send(tok, fixed)).status == "sent"
    waiting = {**req("old held", to="x@other.test"), "message_id": "<held-1@agents.test>"}
    held = await enforcer.send(tok, waiting)  # held: keeps its Message-ID claim, not its fingerprint's
    assert held.status == "pending_approval"
    assert await _rows(store, "enf_claims") == 6
    clock.now += 30 * DAY
    fresh = await enforcer.send(tok, req("fresh"))
    assert fresh.status == "sent"
    report = await compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=2)
    assert report.claims == 5 and report.sends == 4
    kept = await store.execute_sql("SELECT kind, claim_key FROM enf_claims ORDER BY kind", ())
    assert [k for k, _ in kept] == ["fp", "msgid"] and kept[1][1] == "<held-1@agents.test>"
    # What they still refuse, they refuse: the fresh send's duplicate, and the held
    # send's Message-ID (answered with the held send).
    dup = await enforcer.send(tok, req("fresh"))
    assert (dup.status, dup.code) == ("blocked", "duplicate")
    again = await enforcer.send(tok, waiting)
    assert (again.status, again.approval_id) == ("pending_approval", held.approval_id)
    assert (await compact_enforcer(store, older_than=7 * DAY, now=clock.now)).claims == 0


async def test_finished_payments_are_compacted_and_still_answer(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink, tmp_path: Path
) -> None:
    from envelopay.enforcer.spend.invoices import MaildirInvoices
    from envelopay.enforcer.spend.payments_exec import reject
    from envelopay.enforcer.spend.policy import SpendLimit

    from .paykit import USDC, make_kit, pay_req, payee_wallet
    from .test_invoice_binding import DNS, deliver, invoice

    root = tmp_path / "mail"
    kit = await make_kit(enforcer, invoices=MaildirInvoices(root), dns=DNS)
    limit = SpendLimit(per_payment=5 * USDC, hourly=20 * USDC, daily=20 * USDC)
    token, address = await kit.agent(limit=limit)
    order = {"to": "seller@partner.test", "from": "buyer@agents.test", "type": "order",
             "body": {"type": "order", "id": "o1", "task": "summarize", "v": "0.1.0"}}
    assert (await enforcer.send(token, order)).status == "sent"
    mid = deliver(root, invoice())
    by_invoice = await kit.payments.submit("pay_invoice", token, {"invoice": mid})
    wallet = payee_wallet()
    plain = await kit.payments.submit("pay", token, pay_req(wallet, 3 * USDC, key="p1", note="report"))
    stranger = {"to": "x@elsewhere.test"}
    held = await kit.payments.submit("pay", token, pay_req(wallet, USDC, key="h1", **stranger))
    refused = await kit.payments.submit("pay", token, pay_req(wallet, USDC, key="h2", **stranger))
    assert (await reject(kit.payments, refused.id or "")).ok
    statuses = [d.status for d in (by_invoice, plain, held)]
    assert statuses == ["paid_and_sent", "paid_and_sent", "pending_approval"]
    clock.now += 30 * DAY
    fresh = await kit.payments.submit("pay", token, pay_req(wallet, 4 * USDC, key="f1"))
    assert fresh.status == "paid_and_sent"

    report = await compact_enforcer(store, older_than=7 * DAY, now=clock.now, batch=1)
    assert report.payments == 3  # the two paid and the rejected; the held and the fresh stay whole
    assert report.spend_counters == 2  # last month's hour and day; today's stay
    rows = {r[0]: r[1:] for r in await store.execute_sql(
        "SELECT idem_key, request, tx_blob, taken, compacted_at FROM enf_payments", ())}
    for key in ("p1", "h2"):
        assert rows[key][:3] == ('{"mail": {}, "compacted": true}', None, "[]") and rows[key][3] == clock.now
    for key in ("h1", "f1"):
        assert rows[key][3] is None and "payment" in json.loads(rows[key][0])
    # The answers are the same: a retried call gets its first outcome, with its proof and
    # its PAY's Message-ID; the INVOICE is paid once (its ORDER's send record aged out too).
    for first, call, body in (
        (plain, "pay", pay_req(wallet, 3 * USDC, key="p1")),
        (by_invoice, "pay_invoice", {"invoice": mid}),
    ):
        again = await kit.payments.submit(call, token, body)
        assert (again.status, again.id, again.tx_id, again.message_id) == (
            "paid_and_sent", first.id, first.tx_id, first.message_id
        ), again
    other = await kit.payments.submit("pay_invoice", token, {"invoice": "inv1", "idempotency_key": "fresh"})
    assert (other.status, other.code) == ("blocked", "invoice_already_paid")
    gone = await kit.payments.submit("pay", token, pay_req(wallet, USDC, key="h2", **stranger))
    assert (gone.status, gone.id) == ("blocked", refused.id)
    assert len(kit.payment_txs(address)) == 3  # nothing paid twice
    # Today's caps still count what was spent today: 4 of 20 USDC.
    assert len(await store.execute_sql("SELECT 1 FROM enf_spend_counters", ())) == 2
    queue = [r.id for r in await kit.payments.store.queue()]
    assert queue[0] == held.id  # still held first, whole
    again = await compact_enforcer(store, older_than=7 * DAY, now=clock.now)
    assert (again.payments, again.spend_counters) == (0, 0)
