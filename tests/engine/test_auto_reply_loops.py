"""Robots answering robots through the real walled garden (LMTP, Maildirs), over SQLite
and PostgreSQL (issue 29, item 9).

Each party reads its own Maildir and sends through the garden; a round moves every
queued mail one hop, and the exchange runs until a round moves nothing. Two workers
never answer each other's OOPS; a robot that marks its answers (Auto-Submitted) is read
and not answered; a robot that does not mark them is answered `per_thread` times, then
the loop detector holds the worker's answers. Before: the worker answered every WHICH
of the unmarked robot (the exchange ran until the round cap) and the marked robot's too.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

from envelopay.engine import Engine, Outcome
from envelopay.engine.outbox import DirectHook, OutboxDrainer
from envelopay.ledger.store import AnswerLimits, Store
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.compose import compose_message, reply_headers
from envelopay.protocol.messages import Order, Which
from envelopay.protocol.parse import parse
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

A = "a@garden.local"
B = "b@garden.local"
ROBOT = "robot@garden.local"
ROUNDS = 60  # far more than any exchange here needs; reaching it means a loop

Reader = Callable[[bytes], Awaitable[object]]


def engine(store: Store, address: str, clock: k.Clock, limits: AnswerLimits | None) -> Engine:
    return Engine(store, address=address, domain="garden.local", rails={}, app=WorkerApp(), clock=clock,
                  answer_limits=limits)


class Exchange:
    """Parties on one garden: each reads its Maildir with its reader; engines' outboxes
    are drained through the garden."""

    def __init__(self, garden: GardenServer, transport: GardenTransport, clock: k.Clock) -> None:
        self.garden, self.transport, self.clock = garden, transport, clock
        self.readers: dict[str, Reader] = {}
        self.drainers: list[OutboxDrainer] = []
        self.received: dict[str, int] = {}

    def engine(self, eng: Engine) -> Engine:
        self.drainers.append(OutboxDrainer(eng.store, DirectHook(self.transport), clock=self.clock,
                                           owner=eng.worker_id))
        self.readers[eng.address] = eng.handle
        return eng

    async def run(self) -> int:
        """Move mail until nothing moves; the number of rounds it took."""
        for n in range(1, ROUNDS + 1):
            moved = 0
            for drainer in self.drainers:
                moved += len((await drainer.drain()).sent)
            for address, read in self.readers.items():
                box = self.garden.maildir(address)
                for path in sorted((box / "new").iterdir()):
                    raw = path.read_bytes()
                    path.rename(box / "cur" / path.name)
                    self.received[address] = self.received.get(address, 0) + 1
                    await read(raw)
                    moved += 1
            if moved == 0:
                return n
        return ROUNDS


def robot(ex: Exchange, *, marked: bool) -> Reader:
    """A test peer answering every mail it gets with a WHICH in the thread; `marked`: with
    Auto-Submitted: auto-replied, as RFC 3834 asks (a vacation responder), or without."""
    ids = itertools.count(1)

    async def answer(raw: bytes) -> None:
        parsed = parse(raw)
        assert parsed.from_addr is not None
        irt, refs = reply_headers(parsed)
        out, _ = compose_message(Which(id=f"rw{next(ids)}"), sender=ROBOT, recipient=parsed.from_addr,
                                 domain="garden.local", now=ex.clock(), in_reply_to=irt, references=refs)
        if marked:
            out = b"Auto-Submitted: auto-replied\r\n" + out
        await ex.transport.send(out, ROBOT, parsed.from_addr)

    return answer


async def _garden(tmp_path: Path) -> GardenServer:
    return GardenServer(tmp_path / "garden", [A, B, ROBOT], open_garden=True)


async def test_two_workers_never_answer_each_others_oops(store: Store, tmp_path: Path) -> None:
    clock = k.Clock()
    async with await _garden(tmp_path) as garden:
        transport = GardenTransport(garden.endpoint)
        try:
            ex = Exchange(garden, transport, clock)
            # No limits: the OOPS rule and the Auto-Submitted mark alone stop it.
            a = ex.engine(engine(store, A, clock, None))
            ex.engine(engine(store, B, clock, None))
            await a.send(Order(id="ord_bad", task={"op": "nope"}), B)  # B refuses: OOPS unknown_task
            rounds = await ex.run()
        finally:
            await transport.close()
    assert rounds < ROUNDS
    assert ex.received == {B: 1, A: 1}  # the ORDER, its OOPS; nothing after
    assert store.outbox_pending(clock.now + timedelta(days=1)) == []


async def test_a_robot_that_marks_its_answers_is_not_answered(store: Store, tmp_path: Path) -> None:
    clock = k.Clock()
    async with await _garden(tmp_path) as garden:
        transport = GardenTransport(garden.endpoint)
        try:
            ex = Exchange(garden, transport, clock)
            w = ex.engine(engine(store, A, clock, AnswerLimits()))
            ex.readers[ROBOT] = robot(ex, marked=True)
            outcomes: list[Outcome] = []

            async def read(raw: bytes) -> None:
                outcomes.append(await w.handle(raw))

            ex.readers[A] = read
            await w.send(Which(id="w_first"), ROBOT)  # a person asks the robot once
            rounds = await ex.run()
        finally:
            await transport.close()
    assert rounds < ROUNDS
    assert ex.received == {ROBOT: 1, A: 1}
    assert [(o.status, o.unanswered) for o in outcomes] == [("processed", "auto_submitted")]


async def test_a_robot_that_does_not_mark_its_answers_loops_only_to_the_limit(
    store: Store, tmp_path: Path
) -> None:
    clock = k.Clock()
    limits = AnswerLimits(per_peer=50, per_thread=4, window=timedelta(hours=1))
    async with await _garden(tmp_path) as garden:
        transport = GardenTransport(garden.endpoint)
        try:
            ex = Exchange(garden, transport, clock)
            w = ex.engine(engine(store, A, clock, limits))
            ex.readers[ROBOT] = robot(ex, marked=False)
            outcomes: list[Outcome] = []

            async def read(raw: bytes) -> None:
                outcomes.append(await w.handle(raw))

            ex.readers[A] = read
            await w.send(Which(id="w_first"), ROBOT)
            rounds = await ex.run()
        finally:
            await transport.close()
    assert rounds < ROUNDS
    # Our WHICH and 4 METHODS reached the robot; its 5 WHICHes reached us; the fifth
    # drew no answer.
    assert ex.received == {ROBOT: 5, A: 5}
    assert [o.unanswered for o in outcomes] == [None, None, None, None, "loop_detected"]
