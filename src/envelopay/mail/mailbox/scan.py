"""The incremental refresh: index the Maildir files the index does not know yet.

Each folder directory (new/, cur/) is listed only when its mtime moved since its last
complete listing, or moved within the last second (a coarse clock could hide a second
change in the same tick). An unchanged mailbox costs eight stat calls. A listed
directory's names are looked up in the index in chunks; unknown files are indexed in
batches of `BATCH`, each batch one transaction, so a first open over 100k messages
streams, reports progress, and an interruption keeps every finished batch (the next
refresh skips what is indexed and goes on). The directory's mtime is recorded (as seen
before its listing) only once all of it is indexed.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from envelopay.mail.mailbox.index import MailIndex
from envelopay.mail.mailbox.records import MailRecord, Progress
from envelopay.mail.mailbox.storage import MailFolders, base_name

__all__ = ["BATCH", "Progress", "scan_folders", "terminal_progress"]

BATCH = 200
_RACY_NS = 1_000_000_000



def scan_folders(
    files: MailFolders,
    index: MailIndex,
    index_file: Callable[[str, Path], MailRecord],
    progress: Progress | None = None,
) -> list[MailRecord]:
    added: list[MailRecord] = []
    total = 0
    for folder, directory in files.dirs():
        key = str(directory)
        try:
            mtime = os.stat(directory).st_mtime_ns
        except FileNotFoundError:
            continue
        if index.dir_mtime(key) == mtime and time.time_ns() - mtime >= _RACY_NS:
            continue
        names = sorted(n for n in os.listdir(directory) if not n.startswith("."))
        known = index.files_by_name([base_name(n) for n in names])
        todo: list[Path] = []
        with index.batch():
            for n in names:
                seen = known.get(base_name(n))
                if seen is None:
                    todo.append(directory / n)
                elif (
                    seen[1] != f"{directory.name}/{n}" and files.locate(folder, base_name(n), seen[1]) is None
                ):
                    index.moved(seen[0], f"{directory.name}/{n}")
        total += len(todo)
        for i in range(0, len(todo), BATCH):
            with index.batch():
                for path in todo[i : i + BATCH]:
                    if path.exists():  # taken meanwhile by a reader: indexed where it went
                        added.append(index_file(folder, path))
            if progress is not None:
                progress(len(added), total)
        index.set_dir_mtime(key, mtime)
    return added


def terminal_progress(stream: TextIO | None = None, what: str = "indexing the mailbox") -> Progress | None:
    """A progress line for a long first open (or an index upgrade), on a terminal only
    (None elsewhere)."""
    out = stream if stream is not None else sys.stderr
    if not out.isatty():
        return None

    def show(done: int, total: int) -> None:
        out.write(f"\r{what}: {done}/{total} messages (Ctrl-C resumes next time)")
        if done >= total:
            out.write("\n")
        out.flush()

    return show
