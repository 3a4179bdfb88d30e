"""Where a bench script keeps its files for one run, shared by the scripts under bench/.

Why a series must not delete between its scripts: on a file system without a journal (this
machine's ext4: /proc/fs/jbd2 is empty), allocating an inode skips every inode of the group
freed in the last 60 s (360 s while its inode-table block is dirty), reading that block for
each one (`recently_deleted`, fs/ext4/ialloc.c), with the directory's lock held. A script
that removes thousands of files therefore slows every file creation in the minutes after it.
Measured with bench/worker.py (2026-12-05): the garden floor read 156-250 flow-equivalents/s
right after another run had removed its files, 297-318/s with nothing removed; under perf, a
fifth of the garden's CPU was that scan.

`make bench` sets BENCH_KEEP to one folder for the whole series and removes it after the last
script. A script run alone (no BENCH_KEEP) removes its files when it ends, as before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["discard", "new_dir", "run_dir"]


def _keep() -> Path | None:
    keep = os.environ.get("BENCH_KEEP")
    return Path(keep) if keep else None


def new_dir(prefix: str) -> Path:
    """A fresh folder: under BENCH_KEEP when the series keeps its files, else in the
    system's temporary folder (the caller removes it, with `discard`)."""
    keep = _keep()
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=keep))


def discard(path: Path) -> None:
    """Remove `path` now, unless the series keeps its files until it ends (BENCH_KEEP)."""
    if _keep() is None:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def run_dir(prefix: str) -> Iterator[Path]:
    """A fresh folder for the `with` block, removed after it unless BENCH_KEEP is set."""
    path = new_dir(prefix)
    try:
        yield path
    finally:
        discard(path)
