"""The PAY's SMTP transaction opened while its payment is signed and broadcast
(payments_exec._open_envelope, delivery.SmtpEnvelope), against a real aiosmtpd sink with
and without PIPELINING, on both stores and a LiteSVM chain: delivered once with the
right bytes; nothing delivered when the payment fails; a refused RCPT keeps the ordinary
outcome; a dropped connection and a late body fall back and deliver once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from envelopay import dkim
from envelopay.enforcer.core import Enforcer
from envelopay.enforcer.delivery import SmtpDeliverer, SmtpEnvelope, dkim_signer
from envelopay.enforcer.smtp_pipe import data_block
from envelopay.enforcer.store import EnforcerStore
from envelopay.mail.smtp import SmtpConfig, send_raw
from envelopay.protocol.parse import parse

from .conftest import Clock, Sink
from .paykit import USDC, Kit, make_kit, pay_req, payee_wallet


class Counting(SmtpDeliverer):
    """The real deliverer, counting which way each message went."""

    def __init__(self, config: SmtpConfig, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.opened = 0
        self.plain = 0

    def open_envelope(self, *, sender: str, recipient: str) -> SmtpEnvelope | None:
        self.opened += 1
        return super().open_envelope(sender=sender, recipient=recipient)

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        self.plain += 1
        self.opened -= 1  # the plain path opens one too: count only the early ones
        await super().deliver(raw, sender=sender, recipient=recipient)


@pytest.fixture(params=[True, False], ids=["pipelining", "no-pipelining"])
def pipelining(request: pytest.FixtureRequest, sink: Sink) -> bool:
    sink.pipelining = bool(request.param)
    return sink.pipelining


async def _kit(store: EnforcerStore, sink: Sink, clock: Clock, **kw: Any) -> tuple[Kit, Counting]:
    deliverer = Counting(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1), **kw)
    kit = await make_kit(Enforcer(store, deliverer, clock=clock))
    return kit, deliverer


def _pay_of(raw: bytes) -> dict[str, Any]:
    parsed = parse(raw)
    assert parsed.valid, parsed
    return dict(parsed.body or {})


async def test_the_pay_goes_once_with_its_proof_and_signature_through_the_early_envelope(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    key = dkim.DkimKey.generate_ed25519()
    clock.now = time.time()  # dkimpy refuses a t= in the future
    deliverer = Counting(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    signer = dkim_signer(key, selector="enf", domain="agents.test", clock=clock)
    kit = await make_kit(Enforcer(store, deliverer, signer=signer, clock=clock))
    try:
        token, address = await kit.agent()
        to = payee_wallet()
        done = [await kit.payments.submit("pay", token, pay_req(to, USDC, key=f"k{n}")) for n in range(3)]
        assert [d.status for d in done] == ["paid_and_sent"] * 3, done
        assert (deliverer.opened, deliverer.plain) == (3, 0)  # every PAY went the early way
        assert len(sink.messages) == 3 and len(sink.peers) == 1  # once each, one pooled connection
        dns = dkim.table_dns({"enf._domainkey.agents.test": key.dns_txt_record()})
        for d, (mail_from, rcpts, raw) in zip(done, sink.messages, strict=True):
            assert (mail_from, rcpts) == ("buyer@agents.test", ["seller@partner.test"])
            verdict = await dkim.verify(raw, dns=dns)  # the bytes signed are the bytes received
            assert verdict.status == "pass", verdict
            assert parse(raw).message_id == d.message_id
            assert _pay_of(raw)["proof"] == {"tx": d.tx_id}
        assert sorted(kit.payment_txs(address)) == sorted(d.tx_id for d in done)
    finally:
        await deliverer.aclose()


async def test_a_failed_payment_after_the_envelope_opened_delivers_nothing(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, address = await kit.agent(usdc=3 * USDC)
        to = payee_wallet()
        first = await kit.payments.submit("pay", token, pay_req(to, USDC, key="a"))
        assert first.status == "paid_and_sent" and len(deliverer._idle) == 1  # the pool is warm
        # The envelope is written on the pooled connection, then the rail refuses: no money.
        failed = await kit.payments.submit("pay", token, pay_req(to, 5 * USDC, key="b"))
        assert (failed.status, failed.code) == ("failed", "insufficient_funds"), failed
        assert deliverer.opened == 2 and deliverer._idle == []  # that connection is not pooled
        await asyncio.sleep(0.05)  # let the sink read what it was sent, and the close
        if pipelining:  # MAIL, RCPT and DATA had gone in one write before the payment
            assert sink.rcpts == ["seller@partner.test"] * 2
        assert len(sink.messages) == 1 and sink.live == 0  # closed, not left in DATA
        # The next PAY goes on a fresh connection, once.
        after = await kit.payments.submit("pay", token, pay_req(to, USDC, key="c"))
        assert after.status == "paid_and_sent", after
        assert len(sink.messages) == 2 and len(sink.peers) == 2
        assert _pay_of(sink.messages[1][2])["proof"] == {"tx": after.tx_id}
        assert len(kit.payment_txs(address)) == 2
    finally:
        await deliverer.aclose()


async def test_a_refused_rcpt_during_the_overlap_is_the_ordinary_permanent_failure(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, address = await kit.agent()
        sink.rcpt_reply = "550 5.1.1 no such user"
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
        # The money moved; the PAY is not delivered (a 5xx is final: no retry on a fresh
        # connection), and the intent says so and stays PAID for recovery.
        assert d.state == "paid" and d.tx_id and kit.payment_txs(address) == [d.tx_id], d
        assert "not delivered yet" in d.reason and "550" in d.reason and "permanent" in d.reason
        assert sink.messages == [] and sink.rcpts == ["seller@partner.test"]
        assert deliverer._idle == []
        # Once the server accepts again, recovery delivers it once.
        sink.rcpt_reply = None
        again = await kit.payments.status(token, d.id)
        assert again.status == "paid_and_sent" and len(sink.messages) == 1, again
        assert _pay_of(sink.messages[0][2])["proof"] == {"tx": d.tx_id}
    finally:
        await deliverer.aclose()


async def test_a_connection_dropped_mid_envelope_falls_back_and_delivers_once(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, _ = await kit.agent()
        assert (await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="a"))).status == (
            "paid_and_sent"
        )
        sink.drop_at_rcpt = 1  # the pooled connection dies under the early envelope
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="b"))
        assert d.status == "paid_and_sent", d
        assert len(sink.messages) == 2 and sink.drop_at_rcpt == 0
        assert _pay_of(sink.messages[1][2])["proof"] == {"tx": d.tx_id}
        assert len(sink.rcpts) == 3  # the dropped attempt and the fresh one
    finally:
        await deliverer.aclose()


async def test_a_body_later_than_hold_goes_the_fresh_way_once(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock, hold=-1.0)  # every body is "late"
    try:
        token, _ = await kit.agent()
        done = [await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key=f"k{n}"))
                for n in range(2)]
        assert [d.status for d in done] == ["paid_and_sent"] * 2
        assert [_pay_of(m[2])["proof"] for m in sink.messages] == [{"tx": d.tx_id} for d in done]
        assert deliverer._idle == []  # an abandoned transaction's connection is closed
    finally:
        await deliverer.aclose()


ODD = (
    b"From: a@agents.test\r\nTo: b@partner.test\r\nMessage-ID: <odd@agents.test>\r\n"
    b"Subject: dots\r\n\r\n.leading dot\r\n..two\nbare LF\rbare CR\r\n.\r\nlast line without CRLF"
)


async def test_the_pipelined_data_phase_carries_what_aiosmtplib_carries(sink: Sink, pipelining: bool) -> None:
    config = SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1)
    deliverer = SmtpDeliverer(config)
    try:
        await deliverer.deliver(ODD, sender="a@agents.test", recipient="b@partner.test")
        result = await send_raw(ODD, sender="a@agents.test", recipient="b@partner.test", config=config)
        assert result.ok
        (_, _, ours), (_, _, theirs) = sink.messages
        assert ours == theirs
        assert data_block(b"a\n.b") == b"a\r\n..b\r\n.\r\n"
    finally:
        await deliverer.aclose()


async def test_a_delivery_cancelled_mid_transaction_closes_its_connection(
    sink: Sink, pipelining: bool
) -> None:
    deliverer = SmtpDeliverer(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    try:
        await deliverer.deliver(ODD, sender="a@agents.test", recipient="b@partner.test")
        assert len(deliverer._idle) == 1 and sink.live == 1
        sink.data_delay = 5.0  # the final reply is late: the caller gives up meanwhile
        task = asyncio.ensure_future(
            deliverer.deliver(ODD, sender="a@agents.test", recipient="b@partner.test")
        )
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert deliverer._idle == [] and sink.live == 0  # closed, not pooled half-way
    finally:
        await deliverer.aclose()
