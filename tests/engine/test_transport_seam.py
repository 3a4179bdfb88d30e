"""The one outbound seam (envelopay.mail.transport) with its MockTransport: the outbox drainer
sends through it on both ledgers, a permanent refusal fails a row at once, a failure for now
is retried, and the one DKIM signer (envelopay.dkim.DkimSigner) signs what leaves."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from envelopay import dkim
from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.errors import TransportError
from envelopay.ledger.store import Store
from envelopay.mail.transport import DeliveryRefused, EnvelopeOpener, Transport
from envelopay.protocol.messages import Which
from envelopay.testing import MockTransport

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


async def _queue(store: Store, clock: Clock, *recipients: str) -> list[str]:
    store.migrate()
    engine = Engine(store, address="a@garden.local", domain="garden.local", rails={}, app=BaseApplication(),
                    clock=clock)
    return [(await engine.send(Which(id=f"w{i}"), to)).message_id for i, to in enumerate(recipients)]


async def test_the_drainer_sends_through_the_mock_signed(store: Store) -> None:
    clock = Clock()
    mids = await _queue(store, clock, "b@garden.local", "c@garden.local")
    key = dkim.DkimKey.generate_ed25519()
    mock = MockTransport()
    transport: Transport = mock  # the seam's one method is all the drainer needs
    signer = dkim.dkim_signer(key, selector="s", domain="garden.local")
    rep = await OutboxDrainer(store, DirectHook(transport, signer), clock=clock).drain()
    assert sorted(rep.sent) == sorted(mids)
    assert [(m.sender, m.recipient) for m in mock.sent] == [("a@garden.local", "b@garden.local"),
                                                            ("a@garden.local", "c@garden.local")]
    raw = mock.to("b@garden.local")[0]
    assert raw.startswith(b"DKIM-Signature:")
    # t= is the row's Date, not the clock at send time: a resend is the same bytes.
    assert f"t={int(NOW.timestamp())};".encode() in raw
    dns = dkim.table_dns({"s._domainkey.garden.local": key.dns_txt_record()})
    assert (await dkim.verify(raw, dns=dns)).status == "pass"


async def test_a_refused_recipient_fails_its_row_at_once(store: Store) -> None:
    clock = Clock()
    mids = await _queue(store, clock, "gone@garden.local", "b@garden.local")
    mock = MockTransport(refuse=["Gone@garden.local"])
    rep = await OutboxDrainer(store, DirectHook(mock), clock=clock, max_attempts=5).drain()
    assert rep.failed == [mids[0]] and rep.sent == [mids[1]]
    row = store.outbox_get(mids[0])
    assert row is not None and row.status == "failed" and "no such mailbox" in (row.last_error or "")
    assert mock.to("gone@garden.local") == []


async def test_a_failure_for_now_is_retried_and_sent_once(store: Store) -> None:
    clock = Clock()
    mids = await _queue(store, clock, "b@garden.local")
    mock = MockTransport()
    mock.fail_next(1)
    drainer = OutboxDrainer(store, DirectHook(mock), clock=clock, backoff=lambda n: timedelta(seconds=10))
    assert (await drainer.drain()).retry == mids
    assert mock.sent == []
    clock.now += timedelta(seconds=11)
    assert (await drainer.drain()).sent == mids
    assert len(mock.to("b@garden.local")) == 1 and mock.attempts == 2


async def test_the_mock_opens_early_envelopes() -> None:
    mock = MockTransport(refuse=["gone@x.test"])
    assert isinstance(mock, EnvelopeOpener)
    refused = mock.open_envelope(sender="a@x.test", recipient="gone@x.test")
    assert refused is not None
    assert "no such mailbox" in await refused.stage(b"body")  # heard before the body goes
    refused.abort()
    kept = mock.open_envelope(sender="a@x.test", recipient="b@x.test")
    assert kept is not None and await kept.stage(b"body") == ""
    await kept.send_body(b"body")
    with pytest.raises(RuntimeError):
        await kept.send_body(b"body")
    aborted = mock.open_envelope(sender="a@x.test", recipient="c@x.test")
    assert aborted is not None
    aborted.abort()
    assert [m.recipient for m in mock.sent] == ["b@x.test"]
    assert MockTransport(envelopes=False).open_envelope(sender="a@x.test", recipient="b@x.test") is None


async def test_the_mock_raises_what_real_transports_raise() -> None:
    mock = MockTransport()
    mock.refuse("b@x.test")
    with pytest.raises(DeliveryRefused) as refused:
        await mock.send(b"m", "a@x.test", "b@x.test")
    assert refused.value.permanent
    mock.fail_next(why="421 busy")
    with pytest.raises(TransportError) as failed:
        await mock.send(b"m", "a@x.test", "c@x.test")
    assert not isinstance(failed.value, DeliveryRefused) and "421 busy" in str(failed.value)
    await mock.close()
    assert mock.closed


def test_one_signer_for_datetime_and_epoch_clocks() -> None:
    key = dkim.DkimKey.generate_ed25519()
    raw = b"From: a@x.test\r\nTo: b@x.test\r\nSubject: s\r\nMessage-ID: <1@x.test>\r\n\r\nbody\r\n"
    by_date = dkim.dkim_signer(key, selector="s", domain="x.test", clock=lambda: NOW)
    by_epoch = dkim.dkim_signer(key.private_pem(), selector="s", domain="x.test", clock=NOW.timestamp)
    assert by_date(raw) == by_epoch(raw) == by_date.sign_at(raw, NOW)
    assert f"t={int(NOW.timestamp())};".encode() in by_date(raw)
