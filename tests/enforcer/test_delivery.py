"""Protocol messages composed by the enforcer, DKIM-signed with the enforcer's key, over
SMTP to aiosmtpd and over LMTP into the walled garden."""

from __future__ import annotations

import time
from pathlib import Path

from envelopay import dkim
from envelopay.dkim import dkim_signer
from envelopay.enforcer.send.backends import SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay.protocol.messages import Which
from envelopay.protocol.parse import parse

from .conftest import Clock, Sink

WHICH = {"type": "which", "body": {"v": "0.1.0", "note": "what do you sell?"}}


async def test_protocol_message_is_composed_signed_and_delivered(
    store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    key = dkim.DkimKey.generate_ed25519()
    clock.now = time.time()  # dkimpy refuses a t= in the future
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    signer = dkim_signer(key, selector="enf", domain="agents.test", clock=clock)
    enforcer = Enforcer(store, deliverer, signer=signer, clock=clock)
    _, token = await enforcer.create_agent("buyer", "buyer@agents.test", allow=("worker@shop.test",))
    d = await enforcer.send(
        token,
        {"to": "worker@shop.test", "from": "buyer@agents.test", "in_reply_to": "<q@shop.test>", **WHICH},
    )
    await deliverer.close()
    assert d.status == "sent", d
    (_, rcpts, raw), = sink.messages
    assert rcpts == ["worker@shop.test"]
    verdict = await dkim.verify(raw, dns=dkim.table_dns({"enf._domainkey.agents.test": key.dns_txt_record()}))
    assert verdict.status == "pass" and verdict.domain == "agents.test", verdict
    parsed = parse(raw)
    assert isinstance(parsed.message, Which) and parsed.message.note == "what do you sell?"
    assert b"X-Envelopay-Agent: buyer" in raw


async def test_delivery_into_the_walled_garden(tmp_path: Path, clock: Clock) -> None:
    garden = GardenServer(tmp_path / "garden", ["worker@garden.local"], unix_path=tmp_path / "lmtp.sock",
                          fsync=False, open_garden=True)
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    try:
        async with garden:
            enforcer = Enforcer(store, GardenTransport(tmp_path / "lmtp.sock", reuse=False), clock=clock)
            _, token = await enforcer.create_agent("a1", "a1@garden.local", allow=("garden.local",))
            ok = await enforcer.send(token, {"to": "worker@garden.local", "from": "a1@garden.local", **WHICH})
            assert ok.status == "sent"
            outside = await enforcer.send(
                token, {"to": "nobody@garden.local", "from": "a1@garden.local", **WHICH}
            )
            assert outside.status == "failed" and "garden refused" in outside.reason
        files = list((tmp_path / "garden" / "worker@garden.local" / "new").iterdir())
        assert len(files) == 1
        assert isinstance(parse(files[0].read_bytes()).message, Which)
    finally:
        await store.close()


async def test_smtp_connections_are_reused_and_failures_fall_back_to_send_raw(
    store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    async def no_wait(_: float) -> None:
        return None

    config = SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=2)
    deliverer = SmtpTransport(config, sleep=no_wait)
    enforcer = Enforcer(store, deliverer, clock=clock)
    _, token = await enforcer.create_agent("p1", "p1@agents.test", allow=("shop.test",))
    try:
        for i in range(3):
            d = await enforcer.send(token, {"to": "w@shop.test", "from": "p1@agents.test", "subject": f"{i}"})
            assert d.status == "sent"
        assert len(sink.peers) == 1  # one pooled connection carried all three
        # A 4xx on the pooled connection: retried by send_raw on a fresh one, delivered.
        sink.fail_next = ["451 busy", "451 busy again"]
        d = await enforcer.send(token, {"to": "w@shop.test", "from": "p1@agents.test", "subject": "t"})
        assert d.status == "sent" and len(sink.messages) == 4 and sink.fail_next == []
        # A 5xx is final: no fallback retry.
        sink.fail_next = ["554 no", "250 would have been accepted"]
        d = await enforcer.send(token, {"to": "w@shop.test", "from": "p1@agents.test", "subject": "u"})
        assert d.status == "failed" and "554" in d.reason and len(sink.fail_next) == 1
    finally:
        await deliverer.close()


async def test_the_enforcer_sends_through_the_seam_and_its_mock(store: EnforcerStore, clock: Clock) -> None:
    """The enforcer's transport is the outbound seam: MockTransport stands in for the next hop.
    A recipient refused for good fails the send as the peer's doing (exit 1); a failure for
    now as the environment's (exit 3)."""
    from envelopay.cli.output import delivery_exit
    from envelopay.testing import MockTransport

    mock = MockTransport(refuse=["gone@shop.test"])
    enforcer = Enforcer(store, mock, clock=clock)
    _, token = await enforcer.create_agent("buyer", "buyer@agents.test", allow=("shop.test",))

    def which(to: str, note: str) -> dict[str, object]:
        return {"to": to, "from": "buyer@agents.test", "type": "which", "body": {"v": "0.1.0", "note": note}}

    ok = await enforcer.send(token, which("worker@shop.test", "first"))
    assert ok.status == "sent"
    assert [(m.sender, m.recipient) for m in mock.sent] == [("buyer@agents.test", "worker@shop.test")]
    assert isinstance(parse(mock.sent[0].raw).message, Which)
    gone = await enforcer.send(token, which("gone@shop.test", "second"))
    assert gone.status == "failed" and "no such mailbox" in gone.reason and delivery_exit(gone.reason) == 1
    mock.fail_next()
    busy = await enforcer.send(token, which("worker@shop.test", "third"))
    assert busy.status == "failed" and "try again later" in busy.reason and delivery_exit(busy.reason) == 3
    assert len(mock.sent) == 1 and mock.attempts == 3
