"""The From that DKIM verified must be the From the engine acts on (issue 11, item 3).

The verdict comes from a real signature by evil.test, verified by our verifier; the
engine is handed bytes its parser reads as From buyer@client.test (the reader
disagreement of the adversarial review, where the verifier and the parser read two
different From lines of one message). Before the fix the engine trusted the
verifier's own `aligned` and fulfilled the PAY, sending the FULFILL to the buyer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests._engines import worker

from envelopay import dkim
from envelopay.engine import Engine
from envelopay.engine.alignment import dkim_aligned
from envelopay.ledger.store import Store
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Fulfill, Invoice
from envelopay.testing import mock_rail as k

KEY = dkim.DkimKey.generate_ed25519()
DNS = dkim.table_dns({"s1._domainkey.evil.test": KEY.dns_txt_record()})


def engine(store: Store, policy: Any, prefix: str) -> tuple[Engine, k.DictRail]:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, time=k.T0 + timedelta(hours=1))})
    return worker(store, rail, prefix, dkim_policy=policy), rail


async def evil_verdict(raw_as_mallory: bytes) -> dkim.DkimResult:
    signed = dkim.sign(raw_as_mallory, selector="s1", domain="evil.test", key=KEY)
    result = await dkim.verify(signed, dns=DNS)
    assert (result.status, result.domain, result.aligned) == (
        "pass",
        "evil.test",
        True,
    )  # aligned to ITS From
    return result


async def _invoice(eng: Engine, store: Store) -> tuple[str, str]:
    o = await eng.handle(k.raw(k.order("ord_1")), dkim=None)
    row = store.outbox_get(o.outbox[0])
    assert row is not None and isinstance(row.outbound.message, Invoice)
    return row.outbound.message.id, row.outbound.message_id


async def test_pay_signed_by_another_domain_is_refused_under_required(store: Store) -> None:
    eng, _ = engine(store, "required", "r")
    inv_id, inv_mid = await _invoice(eng, store)
    pay = k.pay("pay_1", "t1", invoice_ref=inv_id)
    verdict = await evil_verdict(k.raw(pay, sender="mallory@evil.test", in_reply_to=inv_mid))
    as_buyer = k.raw(pay, sender=k.BUYER, in_reply_to=inv_mid)
    out = await eng.handle(as_buyer, dkim=verdict)
    assert (out.status, out.oops) == ("refused", OopsCode.DKIM_FAILED)
    assert out.dkim == "pass, not aligned with From"
    assert eng.app.fulfilled == []  # type: ignore[attr-defined]
    assert all(not isinstance(r.outbound.message, Fulfill) for r in store.outbox_pending(k.T0, 100))
    # The buyer's own signature over the same bytes would pass.
    own = dkim.DkimResult("pass", "client.test", True, from_domain="client.test")
    ok = await eng.handle(
        k.raw(pay, sender=k.BUYER, in_reply_to=inv_mid, message_id="<p2@client.test>"), dkim=own
    )
    assert (ok.status, ok.state) == ("processed", "fulfilled")


async def test_misalignment_is_recorded_under_prefer(store: Store) -> None:
    eng, _ = engine(store, "prefer", "p")
    inv_id, inv_mid = await _invoice(eng, store)
    pay = k.pay("pay_1", "t1", invoice_ref=inv_id)
    verdict = await evil_verdict(k.raw(pay, sender="mallory@evil.test", in_reply_to=inv_mid))
    raw = k.raw(pay, sender=k.BUYER, in_reply_to=inv_mid, message_id="<p1@client.test>")
    out = await eng.handle(raw, dkim=verdict)
    assert out.status == "processed" and out.dkim == "pass, not aligned with From"
    recorded = store.inbound_outcome(k.WORKER, "<p1@client.test>")
    assert recorded is not None and recorded["dkim"] == "pass, not aligned with From"


def test_alignment_is_against_the_from_acted_on() -> None:
    sig = dkim.SignatureVerdict(0, "pass", "evil.test", aligned=True)
    evil = dkim.DkimResult("pass", "evil.test", True, signatures=(sig,), from_domain="evil.test")
    assert dkim_aligned(evil, "mallory@evil.test")
    assert not dkim_aligned(evil, "buyer@client.test")
    parent = dkim.SignatureVerdict(0, "pass", "client.test", aligned=True)
    sub = dkim.DkimResult("pass", "client.test", True, signatures=(parent,), from_domain="mail.client.test")
    assert dkim_aligned(sub, "bob@mail.client.test") and not dkim_aligned(sub, "bob@client.test")
    no_from = dkim.DkimResult("pass", "client.test", True, signatures=(parent,), from_domain=None)
    assert not dkim_aligned(no_from, "bob@client.test")
    assert not dkim_aligned(dkim.DkimResult("fail", "client.test"), "bob@client.test")
    assert not dkim_aligned(evil, None)
