"""The Maildir pump serves several messages at once, one thread's in their arrival order
(node/lanes.py, node/runtime.py `pump`).

Before: `pump` handed its consumer one message at a time, so a WHICH behind a burst of
PAYs waited for every one of their verifications on the chain (bench/jobs.py: the WHICH
round trip's p99 under load at 6.6x idle).
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections import defaultdict
from pathlib import Path

import pytest

from envelopay.cli.node_cmds import worker_serve
from envelopay.mail.maildir import deliver_file, ensure_maildir
from envelopay.node.lanes import SHARED, lane_of
from envelopay.node.runtime import MAIL_CONCURRENCY, pump


def mail(mid: str, *, refs: str | None = None, reply_to: str | None = None, body: str = "hi") -> bytes:
    head = f"From: a@garden.test\r\nTo: w@garden.test\r\nMessage-ID: <{mid}>\r\n"
    if reply_to is not None:
        head += f"In-Reply-To: <{reply_to}>\r\n"
    if refs is not None:
        head += f"References: {refs}\r\n"
    return f"{head}Subject: x\r\n\r\n{body}\r\n".encode()


# ------------------------------------------------------------------ the lane of a message


def test_the_lane_is_the_root_of_references_then_in_reply_to_then_the_own_id() -> None:
    assert lane_of(mail("pay@b", refs="<order@b> <inv@w>", reply_to="inv@w")) == "order@b"
    assert lane_of(mail("pay@b", reply_to="inv@w")) == "inv@w"
    assert lane_of(mail("order@b")) == "order@b"


def test_a_folded_references_and_lf_line_ends_are_read() -> None:
    raw = b"Message-ID: <pay@b>\nReferences:\n\t<order@b>\n <inv@w>\nSubject: x\n\nReferences: <not@head>\n"
    assert lane_of(raw) == "order@b"
    # A References in the body is not a header.
    assert lane_of(b"Message-ID: <own@b>\r\n\r\nReferences: <body@b>\r\n") == "own@b"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00\xff\xfe garbage with no header at all",
        b"Subject: no ids\r\n\r\nbody",
        b"Message-ID: no brackets\r\nReferences: neither\r\n\r\n",
        b"Message-ID: <a@b>\r\nMessage-ID: <c@d>\r\n\r\n",  # given twice: which thread is not clear
        b"References: <a@b>\r\nreferences: <c@d>\r\nMessage-ID: <e@f>\r\n\r\n",
        b"Message-ID: <" + b"x" * 5000 + b">\r\n\r\n",  # longer than any msg-id
    ],
)
def test_headers_it_cannot_read_put_the_message_in_the_shared_lane(raw: bytes) -> None:
    assert lane_of(raw) == SHARED


def test_no_bytes_make_it_raise() -> None:
    rng = random.Random(31)
    pieces = [b"References:", b"In-Reply-To:", b"Message-ID:", b"<", b">", b"@", b"\r\n", b"\n", b" ",
              b"\t", b":", b"\xff", b"\x00", b"a"]
    for _ in range(3000):
        raw = b"".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        got = lane_of(raw)
        assert isinstance(got, str) and "<" not in got and ">" not in got


# ------------------------------------------------------------------ the pump


async def _until(check: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():  # type: ignore[operator]
            await asyncio.sleep(0.005)


async def test_one_threads_messages_are_handled_in_order_other_threads_beside_them(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "w@garden.test")
    threads, per_thread, width = 6, 8, 4
    seen: dict[str, list[int]] = defaultdict(list)
    busy: set[str] = set()
    most = 0
    rng = random.Random(7)

    async def consume(_: Path, raw: bytes) -> bool:
        nonlocal most
        lane = lane_of(raw)
        assert lane not in busy, "two messages of one thread at once"
        busy.add(lane)
        most = max(most, len(busy))
        await asyncio.sleep(rng.uniform(0, 0.01))
        seen[lane].append(int(raw.split(b"seq=", 1)[1].split(b"\r\n", 1)[0]))
        busy.discard(lane)
        return True

    stop = asyncio.Event()
    task = asyncio.create_task(pump([box], consume, stop=stop, concurrency=width))
    await asyncio.sleep(0.05)  # the pump watches new/ now: each file is offered as it lands
    for seq in range(per_thread):  # interleaved: t0 #0, t1 #0, …, t0 #1, …
        for t in range(threads):
            root = f"root{t}@b"
            raw = mail(f"m{t}.{seq}@b", refs=f"<{root}> <m{t}.{seq - 1}@b>", body=f"seq={seq}") if seq \
                else mail(root, body="seq=0")
            deliver_file(box, raw, fsync=False)
    await _until(lambda: sum(map(len, seen.values())) == threads * per_thread)
    stop.set()
    await task
    assert set(seen) == {f"root{t}@b" for t in range(threads)}
    assert all(order == list(range(per_thread)) for order in seen.values()), seen
    assert 1 < most <= width  # threads ran beside each other, never more than asked
    assert not list((box / "new").iterdir())
    assert len(list((box / "cur").iterdir())) == threads * per_thread


async def test_stop_finishes_the_messages_being_served_and_starts_no_other(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "w@garden.test")
    release = asyncio.Event()
    started: list[str] = []

    async def consume(_: Path, raw: bytes) -> bool:
        started.append(lane_of(raw))
        await release.wait()
        return True

    for name in ("a@b", "b@b", "c@b"):
        deliver_file(box, mail(name), fsync=False)
    stop = asyncio.Event()
    task = asyncio.create_task(pump([box], consume, stop=stop, concurrency=2))
    await _until(lambda: len(started) == 2)
    stop.set()
    await asyncio.sleep(0.3)  # the pump's loop sees `stop`; the two still run
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 5)
    assert len(started) == 2  # the third was not started after stop
    assert len(list((box / "cur").iterdir())) == 2  # the two served are filed
    assert len(list((box / "new").iterdir())) == 1  # the other stays for the next start


async def test_cancelling_the_pump_leaves_the_messages_being_served_in_new(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "w@garden.test")
    started: list[str] = []
    cancelled: list[str] = []

    async def consume(_: Path, raw: bytes) -> bool:
        started.append(lane_of(raw))
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(lane_of(raw))
            raise
        return True

    for name in ("a@b", "b@b", "c@b"):
        deliver_file(box, mail(name), fsync=False)
    task = asyncio.create_task(pump([box], consume, stop=asyncio.Event(), concurrency=2))
    await _until(lambda: len(started) == 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(cancelled) == sorted(started)  # cancelled, not left running
    assert len(list((box / "new").iterdir())) == 3
    assert not list((box / "cur").iterdir())


async def test_a_consumer_that_raises_or_leaves_a_message_keeps_the_others_going(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "w@garden.test")
    tries: dict[str, int] = defaultdict(int)

    async def consume(_: Path, raw: bytes) -> bool:
        lane = lane_of(raw)
        tries[lane] += 1
        if lane == "bug@b":
            raise RuntimeError("a bug")
        return not (lane == "busy@b" and tries[lane] == 1)  # held elsewhere the first time

    for name in ("bug@b", "busy@b", "fine@b"):
        deliver_file(box, mail(name), fsync=False)
    stop = asyncio.Event()
    task = asyncio.create_task(pump([box], consume, stop=stop, concurrency=3, again_after=0.1))
    await _until(lambda: len(list((box / "cur").iterdir())) == 3)
    stop.set()
    await task
    filed = sorted(p.name.rsplit(":2,", 1)[1] for p in (box / "cur").iterdir())
    assert filed == ["F", "S", "S"]
    assert dict(tries) == {"bug@b": 1, "busy@b": 2, "fine@b": 1}


async def test_a_width_below_one_is_refused(tmp_path: Path) -> None:
    async def consume(_: Path, raw: bytes) -> None:
        return None

    with pytest.raises(ValueError, match="at least 1"):
        await pump([tmp_path / "w@garden.test"], consume, stop=asyncio.Event(), concurrency=0)


def test_worker_serve_defaults_to_the_pumps_width() -> None:
    assert inspect.signature(worker_serve).parameters["mail_concurrency"].default == MAIL_CONCURRENCY == 8
