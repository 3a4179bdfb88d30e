"""The PAY's SMTP transaction opened while its payment is signed and broadcast
(payments_exec._open_envelope, mail/transport/submission.py SmtpEnvelope), against a real aiosmtpd sink with
and without PIPELINING, on both stores and a LiteSVM chain: delivered once with the
right bytes; nothing delivered when the payment fails; a refused RCPT keeps the ordinary
outcome; a dropped connection and a late body fall back and deliver once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from envelopay import dkim
from envelopay.dkim import dkim_signer
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.errors import TransportError
from envelopay.mail.transport import smtp_pipe
from envelopay.mail.transport.smtp import SmtpConfig, send_raw
from envelopay.mail.transport.smtp_pipe import data_block
from envelopay.mail.transport.submission import SmtpEnvelope, SmtpTransport
from envelopay.protocol.parse import parse
from envelopay.rails.custodial import SignedPayment

from .conftest import Clock, Sink
from .paykit import USDC, Kit, make_kit, pay_req, payee_wallet, proof_tx


class Counting(SmtpTransport):
    """The real deliverer, counting which way each message went."""

    def __init__(self, config: SmtpConfig, **kw: Any) -> None:
        super().__init__(config, **kw)
        self.opened = 0
        self.plain = 0

    def open_envelope(self, *, sender: str, recipient: str) -> SmtpEnvelope | None:
        self.opened += 1
        return super().open_envelope(sender=sender, recipient=recipient)

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        self.plain += 1
        self.opened -= 1  # the plain path opens one too: count only the early ones
        await super().send(raw, sender, recipient)


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
            assert proof_tx(_pay_of(raw)["proof"]) == d.tx_id
        assert sorted(kit.payment_txs(address)) == sorted(d.tx_id for d in done)
    finally:
        await deliverer.close()


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
        assert proof_tx(_pay_of(sink.messages[1][2])["proof"]) == after.tx_id
        assert len(kit.payment_txs(address)) == 2
    finally:
        await deliverer.close()


async def test_a_pay_refused_for_good_before_the_broadcast_moves_no_money(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, address = await kit.agent()
        before = kit.usdc_of(address)
        sink.rcpt_reply = "550 5.1.1 no such user"
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="k"))
        # The server's 550 to RCPT arrives while the payment is signed: the signed bytes
        # are dropped unsent, so there is no money without its PAY.
        assert (d.status, d.code) == ("failed", "pay_mail_refused"), d
        assert "550" in d.reason and d.tx_id is None
        assert kit.payment_txs(address) == [] and kit.usdc_of(address) == before
        assert sink.messages == [] and sink.rcpts == ["seller@partner.test"]
        assert deliverer._idle == []  # that connection is closed, not pooled
        # The caps it took were handed back: the whole day's allowance is still there.
        again = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="k"))
        assert (again.status, again.id) == ("failed", d.id)  # the key's first outcome
        sink.rcpt_reply = None
        ok = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="k2"))
        assert ok.status == "paid_and_sent" and len(sink.messages) == 1, ok
        assert proof_tx(_pay_of(sink.messages[0][2])["proof"]) == ok.tx_id
        assert kit.payment_txs(address) == [ok.tx_id]
    finally:
        await deliverer.close()


async def test_a_refusal_heard_only_after_the_payment_leaves_it_paid_for_recovery(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, address = await kit.agent()
        sink.fail_with = "554 5.7.1 message refused"  # the verdict on the body itself
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
        # The money moved; the PAY is not delivered (a 5xx is final: no retry on a fresh
        # connection), and the intent says so and stays PAID for recovery.
        assert d.state == "paid" and d.tx_id and kit.payment_txs(address) == [d.tx_id], d
        assert "not delivered yet" in d.reason and "554" in d.reason and "permanent" in d.reason
        assert sink.messages == [] and deliverer._idle == []
        # Once the server accepts again, recovery delivers it once.
        sink.fail_with = None
        again = await kit.payments.status(token, d.id)
        assert again.status == "paid_and_sent" and len(sink.messages) == 1, again
        assert proof_tx(_pay_of(sink.messages[0][2])["proof"]) == d.tx_id
    finally:
        await deliverer.close()


async def test_the_body_travels_during_the_broadcast_and_only_the_final_dot_waits(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    events: list[tuple[str, bytes]] = []
    write = smtp_pipe.Session.write

    def logged(self: smtp_pipe.Session, data: bytes) -> None:
        events.append(("wrote", data))
        write(self, data)

    monkeypatch.setattr(smtp_pipe.Session, "write", logged)
    real = kit.payer.broadcast

    async def broadcast(payment: SignedPayment) -> Any:
        events.append(("broadcast", payment.tx_id.encode()))
        return await real(payment)

    monkeypatch.setattr(kit.payer, "broadcast", broadcast)
    try:
        token, _ = await kit.agent()
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC))
        assert d.status == "paid_and_sent" and len(sink.messages) == 1, d
        at = events.index(("broadcast", d.tx_id.encode()))
        before = b"".join(data for kind, data in events[:at] if kind == "wrote")
        after = [data for kind, data in events[at + 1:] if kind == "wrote"]
        # Everything of the message but its end went out before the money moved ...
        assert d.tx_id.encode() in before and b"\r\nDATA\r\n" in before
        assert not before.endswith(b"\r\n.\r\n")
        # ... and the end of data, the one thing that delivers it, only after.
        assert after == [b".\r\n"]
        delivered = sink.messages[0][2]
        assert proof_tx(_pay_of(delivered)["proof"]) == d.tx_id
        assert before.endswith(data_block(delivered)[: -len(b".\r\n")])  # the very bytes
    finally:
        await deliverer.close()


async def test_a_broadcast_the_chain_refuses_after_the_body_went_delivers_nothing(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock)
    try:
        token, address = await kit.agent()
        assert (await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="a"))).status == (
            "paid_and_sent"
        )

        def turn_the_blockhash(point: str) -> None:
            # Between the recorded tx id and the broadcast (the body is at the server by
            # now): another transaction turns the local chain's blockhash, so the signed
            # bytes can never land.
            if point == "after_sign":
                _other_transfer(kit)

        kit.payments.crash = turn_the_blockhash
        d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="b"))
        assert (d.status, d.code) == ("failed", "expired"), d
        await asyncio.sleep(0.05)  # let the sink read the close
        assert len(sink.messages) == 1 and sink.live == 0 and deliverer._idle == []
        assert len(kit.payment_txs(address)) == 1
        kit.payments.crash = lambda _p: None
        ok = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="c"))
        assert ok.status == "paid_and_sent" and len(sink.messages) == 2, ok
        assert proof_tx(_pay_of(sink.messages[1][2])["proof"]) == ok.tx_id
    finally:
        await deliverer.close()


def _other_transfer(kit: Kit) -> None:
    from solders.pubkey import Pubkey

    from envelopay_solana import tx as txb

    other = kit.chain.new_wallet(sol=10**9)
    sol = kit.payer.asset("SOL")
    assert sol is not None
    ixs = txb.payment_instructions(other.pubkey(), Pubkey.from_string(payee_wallet()), sol, 10**6,
                                   create_ata=False)
    assert kit.chain.send(txb.sign(ixs, other, kit.chain.latest_blockhash())).ok


async def test_a_staged_body_is_delivered_by_its_dot_or_not_at_all(sink: Sink, pipelining: bool) -> None:
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    other = ODD.replace(b"Subject: dots", b"Subject: other")
    try:
        staged = deliverer.open_envelope(sender="a@agents.test", recipient="b@partner.test")
        assert staged is not None and await staged.stage(ODD) == ""
        await staged.send_body(ODD)  # only the dot is left to write
        aborted = deliverer.open_envelope(sender="a@agents.test", recipient="b@partner.test")
        assert aborted is not None and await aborted.stage(other) == ""
        aborted.abort()  # staged, never ended: nothing of it is delivered
        changed = deliverer.open_envelope(sender="a@agents.test", recipient="b@partner.test")
        assert changed is not None and await changed.stage(other) == ""
        await changed.send_body(ODD)  # not the staged bytes: those are dropped, these go fresh
        await asyncio.sleep(0.05)
        bodies = [m[2] for m in sink.messages]
        assert len(bodies) == 2 and all(b"Subject: dots" in b for b in bodies)
        assert bodies[0] == bodies[1]  # the staged way carries what the fresh way carries
        refused = deliverer.open_envelope(sender="a@agents.test", recipient="b@partner.test")
        sink.rcpt_reply = "550 5.1.1 no such user"
        assert refused is not None and "550" in await refused.stage(ODD)
        with pytest.raises(TransportError, match="550"):
            await refused.send_body(ODD)  # final: no fresh attempt
        assert len(sink.messages) == 2
    finally:
        await deliverer.close()


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
        assert proof_tx(_pay_of(sink.messages[1][2])["proof"]) == d.tx_id
        assert len(sink.rcpts) == 3  # the dropped attempt and the fresh one
    finally:
        await deliverer.close()


async def test_a_body_later_than_hold_goes_the_fresh_way_once(
    store: EnforcerStore, sink: Sink, clock: Clock, pipelining: bool
) -> None:
    kit, deliverer = await _kit(store, sink, clock, hold=-1.0)  # every body is "late"
    try:
        token, _ = await kit.agent()
        done = [await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key=f"k{n}"))
                for n in range(2)]
        assert [d.status for d in done] == ["paid_and_sent"] * 2
        assert [proof_tx(_pay_of(m[2])["proof"]) for m in sink.messages] == [d.tx_id for d in done]
        assert deliverer._idle == []  # an abandoned transaction's connection is closed
    finally:
        await deliverer.close()


ODD = (
    b"From: a@agents.test\r\nTo: b@partner.test\r\nMessage-ID: <odd@agents.test>\r\n"
    b"Subject: dots\r\n\r\n.leading dot\r\n..two\nbare LF\rbare CR\r\n.\r\nlast line without CRLF"
)


async def test_the_pipelined_data_phase_carries_what_aiosmtplib_carries(sink: Sink, pipelining: bool) -> None:
    config = SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1)
    deliverer = SmtpTransport(config)
    try:
        await deliverer.send(ODD, "a@agents.test", "b@partner.test")
        result = await send_raw(ODD, sender="a@agents.test", recipient="b@partner.test", config=config)
        assert result.ok
        (_, _, ours), (_, _, theirs) = sink.messages
        assert ours == theirs
        assert data_block(b"a\n.b") == b"a\r\n..b\r\n.\r\n"
    finally:
        await deliverer.close()


async def test_a_delivery_cancelled_mid_transaction_closes_its_connection(
    sink: Sink, pipelining: bool
) -> None:
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    try:
        await deliverer.send(ODD, "a@agents.test", "b@partner.test")
        assert len(deliverer._idle) == 1 and sink.live == 1
        sink.data_delay = 5.0  # the final reply is late: the caller gives up meanwhile
        task = asyncio.ensure_future(
            deliverer.send(ODD, "a@agents.test", "b@partner.test")
        )
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert deliverer._idle == [] and sink.live == 0  # closed, not pooled half-way
    finally:
        await deliverer.close()


async def test_no_verdict_after_the_final_dot_is_an_unknown_outcome_never_sent_again(
    sink: Sink, pipelining: bool
) -> None:
    # The server has the whole message and takes longer than we wait to judge it (a milter,
    # a content filter): it may deliver it still, so a second copy on a fresh connection
    # could be a duplicate (RFC 1047). The caller hears "unknown"; nothing is resent.
    config = SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=3, timeout=0.3)
    deliverer = SmtpTransport(config, final_timeout=0.3)
    try:
        await deliverer.send(ODD, "a@agents.test", "b@partner.test")
        sink.data_delay = 2.0
        for staged in (False, True):
            envelope = deliverer.open_envelope(sender="a@agents.test", recipient="b@partner.test")
            assert envelope is not None
            if staged:
                assert await envelope.stage(ODD) == ""
            with pytest.raises(TransportError, match="outcome unknown after the final dot"):
                await envelope.send_body(ODD)
        assert sink.rcpts == ["b@partner.test"] * 3  # one transaction each, no fresh retry
        assert deliverer._idle == []  # those connections are closed, not pooled
    finally:
        await deliverer.close()
