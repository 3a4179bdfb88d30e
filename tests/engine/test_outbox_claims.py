"""Outbox rows are claimed (issue 11, item 5) and resends are byte-identical (item 7),
over SQLite and PostgreSQL and a real garden.

Two drainers with their own ledger connections stand for two worker processes on one
ledger: before claims, both read the same pending rows while the other was sending and
delivered every reply twice, with no crash at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay import dkim
from envelopay.dkim import DkimSigner
from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Store
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.messages import Which
from envelopay.testing import MockTransport
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

A, B = "a@garden.local", "b@garden.local"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None

    def make() -> Store:
        s: Store = SqliteStore(tmp_path / "ledger.db") if dsn is None else PostgresStore(dsn, max_size=2)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


async def _queue(store: Store, n: int, clock: Clock) -> list[str]:
    engine = Engine(store, address=A, domain="garden.local", rails={}, app=BaseApplication(), clock=clock)
    return [(await engine.send(Which(id=f"w{i}"), B)).message_id for i in range(n)]


def _delivered_ids(garden: GardenServer) -> list[str]:
    out = []
    for f in (garden.maildir(B) / "new").iterdir():
        for line in f.read_bytes().splitlines():  # CRLF or LF, however the Maildir stores it
            if line.lower().startswith(b"message-id:"):
                out.append(line.split(b":", 1)[1].strip().decode())
    return out


async def test_two_drainers_on_one_ledger_send_each_row_once(
    open_store: Callable[[], Store], tmp_path: Path
) -> None:
    clock = Clock()
    first, second = open_store(), open_store()
    mids = await _queue(first, 30, clock)
    async with GardenServer(tmp_path / "garden", [B], open_garden=True) as garden:
        t1, t2 = GardenTransport(garden.endpoint), GardenTransport(garden.endpoint)
        d1 = OutboxDrainer(first, DirectHook(t1), clock=clock, owner="w1")
        d2 = OutboxDrainer(second, DirectHook(t2), clock=clock, owner="w2")
        r1, r2 = await asyncio.gather(d1.drain(), d2.drain())
        await t1.close()
        await t2.close()
        delivered = _delivered_ids(garden)
    assert sorted(r1.sent + r2.sent) == sorted(mids)
    assert sorted(delivered) == sorted(mids)  # each reply once
    assert first.outbox_pending(clock.now) == []


async def test_a_dead_drainers_claim_runs_out_then_the_row_goes(open_store: Callable[[], Store]) -> None:
    clock = Clock()
    store = open_store()
    [mid] = await _queue(store, 1, clock)
    # A drainer claimed the row and died before sending it.
    assert [
        r.outbound.message_id for r in store.outbox_claim("dead", clock.now, clock.now + timedelta(minutes=5))
    ] == [mid]
    sent: list[str] = []

    async def hook(out: object, raw: bytes) -> object:
        from envelopay.engine.outbox import SendResult

        sent.append(raw.decode())
        return SendResult("sent")

    live = OutboxDrainer(open_store(), hook, clock=clock, owner="live")  # type: ignore[arg-type]
    assert (await live.drain()).sent == []  # still claimed
    clock.now += timedelta(minutes=5, seconds=1)
    assert (await live.drain()).sent == [mid]  # the lease ran out: at least once
    assert len(sent) == 1


async def test_a_resend_is_the_same_bytes(open_store: Callable[[], Store], tmp_path: Path) -> None:
    clock = Clock()
    store = open_store()
    key = dkim.DkimKey.generate_ed25519()
    rsa = dkim.DkimKey.generate_rsa()
    worker = Engine(store, address=k.WORKER, domain="garden.test", rails={}, app=WorkerApp(), clock=clock)
    which = k.raw(Which(id="w1"), message_id="<w1@client.test>")
    first = await worker.handle(which)
    assert first.outbox
    for signing_key in (key, rsa):
        signer = DkimSigner("s1", "garden.test", signing_key, clock)
        mock = MockTransport()  # keeps the exact bytes handed to it (the next hop's view)
        drainer = OutboxDrainer(store, DirectHook(mock, signer), clock=clock)
        clock.now += timedelta(minutes=3)
        store.mark_failed(first.outbox[0], clock.now, "again", retry_at=clock.now)  # pending again
        await drainer.drain()
        clock.now += timedelta(hours=2)
        # A retransmission of the WHICH queues the recorded reply again.
        again = await worker.handle(
            k.raw(Which(id="w1"), message_id=f"<w1-{len(mock.sent)}-{id(signer)}@client.test>")
        )
        assert again.repeat == "retransmission" and again.outbox == first.outbox
        await drainer.drain()
        got = [m.raw for m in mock.sent]
        assert len(got) == 2 and got[0] == got[1]
        row = store.outbox_get(first.outbox[0])
        assert row is not None
        assert f" t={int(row.outbound.date.timestamp())};".encode() in got[0]
        verdict = await dkim.verify(
            got[1], dns=dkim.table_dns({"s1._domainkey.garden.test": signing_key.dns_txt_record()})
        )
        assert verdict.status == "pass"
