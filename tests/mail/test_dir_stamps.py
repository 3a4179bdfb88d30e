"""The poll's directory mtimes through held descriptors (mail.dir_stamps): a held
directory that is removed, replaced or recreated is followed, and a budget of
descriptors is never exceeded."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
from pathlib import Path

import pytest

from envelopay.mail import dir_stamps
from envelopay.mail.dir_stamps import DirStamps, fd_budget
from envelopay.mail.maildir import Pickup, deliver_file, ensure_maildir


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _dirs(root: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        p = root / f"d{i}"
        p.mkdir()
        out.append(str(p))
    return out


def test_held_and_unheld_directories_report_the_same_mtimes(tmp_path: Path) -> None:
    paths = _dirs(tmp_path, 6)
    before = _open_fds()
    stamps = DirStamps(paths, budget=3)
    assert stamps.held == 3 and _open_fds() == before + 3
    assert [stamps.mtime_ns(i) for i in range(6)] == [os.stat(p).st_mtime_ns for p in paths]
    for p in paths:  # a file added moves each directory's mtime, held or not
        os.utime(p, ns=(1, 1))
        (Path(p) / "x").write_bytes(b"x")
    assert [stamps.mtime_ns(i) for i in range(6)] == [os.stat(p).st_mtime_ns for p in paths]
    assert all(stamps.mtime_ns(i) != 1 for i in range(6))
    stamps.close()
    assert _open_fds() == before


def test_a_removed_directory_reads_missing_and_is_followed_when_it_returns(tmp_path: Path) -> None:
    paths = _dirs(tmp_path, 1)
    stamps = DirStamps(paths, budget=1)
    shutil.rmtree(paths[0])
    assert stamps.mtime_ns(0) is None  # no links left on the held one: its path is asked
    os.mkdir(paths[0])
    os.utime(paths[0], ns=(5_000, 5_000))
    assert stamps.mtime_ns(0) == 5_000
    stamps.close()


def test_a_directory_replaced_under_a_held_descriptor_is_reopened_by_verify(tmp_path: Path) -> None:
    paths = _dirs(tmp_path, 1)
    stamps = DirStamps(paths, budget=1)
    os.rename(paths[0], str(tmp_path / "moved-away"))  # the held inode keeps its links
    os.mkdir(paths[0])
    os.utime(paths[0], ns=(7_000, 7_000))
    stamps.verify()
    assert stamps.mtime_ns(0) == 7_000 and stamps.held == 1
    stamps.close()


def test_the_budget_leaves_headroom_under_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dir_stamps.resource, "getrlimit", lambda _r: (1024, 4096))
    assert fd_budget(10_000) == (1024 - 256) // 2
    assert fd_budget(10) == 10
    monkeypatch.setattr(dir_stamps.resource, "getrlimit", lambda _r: (100, 4096))
    assert fd_budget(10_000) == 0  # below the headroom: every directory by path
    monkeypatch.setattr(dir_stamps.resource, "getrlimit", lambda _r: (resource.RLIM_INFINITY,) * 2)
    assert fd_budget(10_000) == 10_000


async def test_poll_pickup_follows_a_new_dir_replaced_while_it_runs(tmp_path: Path) -> None:
    box = ensure_maildir(tmp_path / "r@garden.test")
    before = _open_fds()
    async with Pickup([box], use_inotify=False, poll_interval=0.005) as pickup:
        await asyncio.sleep(0.05)
        assert _open_fds() == before + 1  # the poll holds new/ open
        os.rename(box / "new", tmp_path / "old-new")
        (box / "new").mkdir()
        deliver_file(box, b"Subject: after\r\n\r\nafter\r\n")
        got = await pickup.next(timeout=10)  # within a verify period (1 s)
        assert got.raw.endswith(b"after\r\n")
        pickup.done(got)
    assert _open_fds() == before  # every held descriptor closed with the pickup
