"""The pickup's poll mode (no inotify) lists only the new/ directories whose mtime moved."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from envelopay.mail import maildir
from envelopay.mail.maildir import Pickup, deliver_file, ensure_maildir


async def test_poll_lists_only_changed_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    boxes = [ensure_maildir(tmp_path / f"a{i}@garden.test") for i in range(200)]
    for b in boxes:  # settled an hour ago: out of the racy window
        os.utime(b / "new", (os.path.getatime(b / "new"), os.path.getmtime(b / "new") - 3600))
    listed: list[str] = []
    real = os.listdir

    def counting(path: int | str | os.PathLike[str]) -> list[str]:
        # The pickup lists new/ through a descriptor it opened without following links.
        listed.append(os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else str(path))
        return real(path)

    async with Pickup(boxes, use_inotify=False, poll_interval=0.005) as pickup:
        assert pickup.mode == "poll"
        monkeypatch.setattr(maildir.os, "listdir", counting)
        await asyncio.sleep(0.2)  # first tick lists each once (nothing known yet)
        listed.clear()
        await asyncio.sleep(0.2)  # dozens of ticks over an unchanged garden
        assert listed == []
        deliver_file(boxes[137], b"Subject: hello\r\n\r\nhi\r\n")
        got = await pickup.next(timeout=10)
        assert got.maildir == boxes[137] and got.raw.endswith(b"hi\r\n")
        assert set(listed) == {str(boxes[137] / "new")}
        pickup.done(got)
        with pytest.raises(TimeoutError):
            await pickup.next(timeout=0.3)  # relisted while racy, never yielded twice


async def test_poll_sees_a_second_delivery_in_the_same_mtime_tick(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "b@garden.test")
    async with Pickup([box], use_inotify=False, poll_interval=0.005) as pickup:
        deliver_file(box, b"Subject: one\r\n\r\n1\r\n")
        first = await pickup.next(timeout=10)
        # Pin the mtime to what the poll saw, as a coarse clock would, then add a file.
        seen = os.stat(box / "new").st_mtime_ns
        deliver_file(box, b"Subject: two\r\n\r\n2\r\n")
        os.utime(box / "new", ns=(seen, seen))
        second = await pickup.next(timeout=10)
        assert {first.raw[-3:], second.raw[-3:]} == {b"1\r\n", b"2\r\n"}


def test_the_poll_backs_off_while_idle_and_not_past_its_ceiling() -> None:
    tick = 0.01
    for _ in range(20):
        tick = maildir.next_poll_interval(tick, False, 0.01, 0.5)
    assert tick == 0.5
    assert maildir.next_poll_interval(tick, True, 0.01, 0.5) == 0.01


async def test_an_idle_poll_ticks_slowly_and_a_delivery_brings_it_back(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "c@garden.test")
    async with Pickup([box], use_inotify=False, poll_interval=0.005, poll_idle_max=0.64) as pickup:
        for _ in range(1000):  # idle: the tick doubles up to its ceiling
            if pickup.interval == 0.64:
                break
            await asyncio.sleep(0.01)
        assert pickup.interval == 0.64
        deliver_file(box, b"Subject: late\r\n\r\nlate\r\n")
        got = await pickup.next(timeout=10)
        assert got.raw.endswith(b"late\r\n")
        assert pickup.interval < 0.64  # the tick that found it went back to 5 ms
        pickup.done(got)
