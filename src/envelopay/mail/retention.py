"""Garden retention: processed mail (in each address's cur/) ages out.

The pickup moves a message to cur/ only after its consumer committed it (the ledger
holds what the step needs), so a file in cur/ is a copy kept for people. Files there
whose mtime (when they were moved, or last flagged) is older than the window are
deleted; new/ (not yet processed) is never touched. A mailbox that reads a garden
Maildir in place as its inbox loses those files too: archive what is to be kept
(`envelopay mail archive` moves it out of the garden) or point the window past it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from envelopay.mail.maildir import UnsafeMaildir, open_maildir

__all__ = ["GardenCompactReport", "prune_processed"]


@dataclass
class GardenCompactReport:
    cutoff: float
    addresses: int = 0
    removed: int = 0
    kept: int = 0
    # What the walk refused to follow: a symlinked address folder, cur/ or message file
    # (an agent can write its own Maildir; nothing is deleted through a link).
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "cutoff": self.cutoff,
            "addresses": self.addresses,
            "removed": self.removed,
            "kept": self.kept,
            "skipped": list(self.skipped),
        }

    def skip(self, path: str, reason: str) -> None:
        self.skipped.append({"path": path, "reason": reason})


def prune_processed(root: Path, *, older_than: float, now: float) -> GardenCompactReport:
    """Delete processed messages older than `older_than` seconds under the garden `root`.

    Each address folder and its cur/ are opened without following symlinks, and files are
    judged and removed relative to that descriptor (lstat, unlink with dir_fd): a link
    planted in a Maildir is skipped and reported, never followed out of that Maildir."""
    report = GardenCompactReport(now - older_than)
    with os.scandir(root) as entries:
        folders = sorted(entries, key=lambda e: e.name)
    for entry in folders:
        if entry.is_symlink():
            report.skip(entry.name, "the address folder is a symlink")
            continue
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            [cur] = open_maildir(Path(root) / entry.name, "cur")
        except FileNotFoundError:  # not a Maildir (no cur/), or gone meanwhile
            continue
        except UnsafeMaildir as exc:
            report.skip(os.path.relpath(exc.filename, root), "a symlink or not a directory")
            continue
        try:
            report.addresses += 1
            _prune_cur(cur, entry.name, report)
        finally:
            os.close(cur)
    return report


def _prune_cur(cur: int, address: str, report: GardenCompactReport) -> None:
    with os.scandir(cur) as files:
        names = [f.name for f in files if not f.name.startswith(".")]
    for name in names:
        try:
            st = os.stat(name, dir_fd=cur, follow_symlinks=False)
        except FileNotFoundError:  # taken meanwhile (an archive, another pruner)
            continue
        if stat.S_ISLNK(st.st_mode):
            report.skip(f"{address}/cur/{name}", "a symlink, not a message")
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        if st.st_mtime >= report.cutoff:
            report.kept += 1
            continue
        try:
            os.unlink(name, dir_fd=cur)
        except FileNotFoundError:
            continue
        report.removed += 1
