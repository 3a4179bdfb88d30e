"""A message's own outbox row goes out beside a drain in progress (`OutboxDrainer.send_now`),
not behind the batch that drain is sending, on SQLite and PostgreSQL; the outbox's
guarantees hold: a row is sent once per claim, a flow's rows go in order, another
drainer's claim is respected (issue 31: the WHICH's p99 under load)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.engine.outbox import OutboxDrainer, SendResult
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, Store
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound

A, B = "a@garden.local", "b@garden.local"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    opened: list[Store] = []
    dsn = request.getfixturevalue("pg_dsn") if request.param == "postgres" else None

    def make() -> Store:
        s: Store = SqliteStore(str(tmp_path / "ledger.db")) if dsn is None else PostgresStore(dsn, max_size=2)
        s.migrate()
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def _write(store: Store, *rows: tuple[str, str]) -> list[str]:
    """Outbox rows (message-id tag, flow) committed in one step; their Message-IDs."""
    obs = [(Outbound(sender=A, recipient=B, message=Which(id=tag), message_id=f"<{tag}@garden.local>",
                     date=NOW), flow) for tag, flow in rows]
    assert store.commit_step(Commit(local=A, now=NOW, outcome={}, outbox=tuple(obs))) == "ok"
    return [ob.message_id for ob, _ in obs]


class Gated:
    """A send hook whose sends of the rows named in `held` wait for `release`."""

    def __init__(self, held: set[str]) -> None:
        self.held, self.release = held, asyncio.Event()
        self.started: list[str] = []
        self.sent: list[str] = []

    async def __call__(self, out: Outbound, raw: bytes) -> SendResult:
        self.started.append(out.message_id)
        if out.message_id in self.held:
            await self.release.wait()
        self.sent.append(out.message_id)
        return SendResult("sent")


async def _until(cond: Callable[[], bool]) -> None:
    while not cond():
        await asyncio.sleep(0.001)


async def test_a_row_goes_out_beside_a_stuck_batch(open_store: Callable[[], Store]) -> None:
    store = open_store()
    batch = _write(store, *((f"b{i}", f"flow{i}") for i in range(5)))
    hook = Gated(set(batch))
    drainer = OutboxDrainer(store, hook, clock=lambda: NOW, parallel=2)
    draining = asyncio.create_task(drainer.drain())
    await _until(lambda: len(hook.started) == 2)  # the batch is stuck in its sends
    [own] = _write(store, ("own", "flowX"))
    rep = await asyncio.wait_for(drainer.send_now([own]), 5)
    assert rep.sent == [own] and not draining.done()  # sent while the batch still waits
    hook.release.set()
    drained = await draining
    assert sorted(drained.sent) == sorted(batch)  # the own row is not the batch's
    assert sorted(hook.sent) == sorted([*batch, own])  # each row once
    assert store.outbox_pending(NOW) == []


async def test_a_batch_passes_over_the_row_send_now_holds(open_store: Callable[[], Store]) -> None:
    store = open_store()
    [own] = _write(store, ("own", "flowX"))
    others = _write(store, ("o1", "flow1"), ("o2", "flow2"))
    hook = Gated({own})
    drainer = OutboxDrainer(store, hook, clock=lambda: NOW)
    direct = asyncio.create_task(drainer.send_now([own]))
    await _until(lambda: own in hook.started)
    drained = await asyncio.wait_for(drainer.drain(), 5)  # claims due rows: `own` comes along
    assert sorted(drained.sent) == sorted(others)
    hook.release.set()
    assert (await direct).sent == [own]
    assert hook.sent.count(own) == 1
    assert (row := store.outbox_get(own)) is not None and row.status == "sent" and row.attempts == 1


async def test_a_later_row_of_the_flow_waits_for_the_direct_one(open_store: Callable[[], Store]) -> None:
    store = open_store()
    [first] = _write(store, ("f1", "flowF"))
    hook = Gated({first})
    drainer = OutboxDrainer(store, hook, clock=lambda: NOW, parallel=4)
    direct = asyncio.create_task(drainer.send_now([first]))
    await _until(lambda: first in hook.started)
    later = _write(store, ("f2", "flowF"), ("g1", "flowG"))
    draining = asyncio.create_task(drainer.drain())
    await _until(lambda: "<g1@garden.local>" in hook.sent)  # another flow is not held up
    assert "<f2@garden.local>" not in hook.started  # but the flow's next row waits
    hook.release.set()
    await direct
    assert sorted((await draining).sent) == sorted(later)
    assert [m for m in hook.sent if "@" in m and m.startswith("<f")] == [first, later[0]]


async def test_send_now_leaves_a_row_behind_an_earlier_pending_one(open_store: Callable[[], Store]) -> None:
    store = open_store()
    first, second = _write(store, ("f1", "flowF"), ("f2", "flowF"))
    hook = Gated(set())
    drainer = OutboxDrainer(store, hook, clock=lambda: NOW)
    assert (await drainer.send_now([second])).count == 0  # f1 first: the drain's
    assert hook.started == []
    row = store.outbox_get(second)
    assert row is not None and row.status == "pending"
    assert (await drainer.drain()).sent == [first, second]
    assert hook.sent == [first, second]


async def test_send_now_respects_any_live_claim(open_store: Callable[[], Store]) -> None:
    store = open_store()
    mine, theirs = _write(store, ("m", "flowM"), ("t", "flowT"))
    hook = Gated(set())
    drainer = OutboxDrainer(store, hook, clock=lambda: NOW, owner="w1")
    other = open_store()  # another process on the same ledger
    claimed = other.outbox_claim_one(mine, "w2", NOW, NOW + timedelta(minutes=5))
    assert claimed is not None and claimed.outbound.message_id == mine
    assert (await drainer.send_now([mine])).count == 0  # w2 holds it
    # A claim of this drainer's own (a drain that died in this process, say) holds too:
    # only a drain, which knows its batch, takes it over.
    held = store.outbox_claim("w1", NOW, NOW + timedelta(minutes=5))
    assert [r.outbound.message_id for r in held] == [theirs]
    assert (await drainer.send_now([theirs])).count == 0
    assert hook.started == []
    assert (await drainer.drain()).sent == [theirs]  # its own claim: the drain takes it over
    later = NOW + timedelta(minutes=5, seconds=1)
    late = OutboxDrainer(store, hook, clock=lambda: later, owner="w1")
    assert (await late.send_now([mine])).sent == [mine]  # w2's lease ran out: at least once


async def test_two_processes_send_one_row_once(open_store: Callable[[], Store]) -> None:
    first, second = open_store(), open_store()
    rows = _write(first, *((f"r{i}", f"flow{i}") for i in range(10)))
    hook = Gated(set())
    d1 = OutboxDrainer(first, hook, clock=lambda: NOW, owner="w1")
    d2 = OutboxDrainer(second, hook, clock=lambda: NOW, owner="w2")
    reps = await asyncio.gather(d1.send_now(rows), d2.send_now(rows), d1.drain(), d2.drain())
    assert sorted(m for r in reps for m in r.sent) == sorted(rows)
    assert sorted(hook.sent) == sorted(rows)


class CountingClaims:
    """A store whose outbox_claim calls (each a write transaction) are counted."""

    def __init__(self, inner: Store) -> None:
        self.inner, self.claims = inner, 0

    def outbox_claim(self, *args: object, **kw: object) -> object:
        self.claims += 1
        return self.inner.outbox_claim(*args, **kw)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


async def test_a_drain_with_nothing_else_to_send_claims_nothing(open_store: Callable[[], Store]) -> None:
    store = open_store()
    counting = CountingClaims(store)
    [own] = _write(store, ("own", "flowA"))
    hook = Gated({own})
    drainer = OutboxDrainer(counting, hook, clock=lambda: NOW)  # type: ignore[arg-type]
    sending = asyncio.create_task(drainer.send_now([own]))
    await _until(lambda: hook.started == [own])
    # The only due row is the one send_now holds: the drain reads, and writes nothing.
    assert (await drainer.drain()).count == 0 and counting.claims == 0
    # A row written meanwhile (another process's, a retry come due) is claimed and sent.
    [other] = _write(store, ("other", "flowB"))
    assert (await drainer.drain()).sent == [other] and counting.claims == 1
    hook.release.set()
    assert (await sending).sent == [own]
    assert (await drainer.drain()).count == 0 and counting.claims == 1
    assert hook.sent.count(own) == 1 and hook.sent.count(other) == 1
