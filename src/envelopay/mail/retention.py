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
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GardenCompactReport", "prune_processed"]


@dataclass
class GardenCompactReport:
    cutoff: float
    addresses: int = 0
    removed: int = 0
    kept: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {
            "cutoff": self.cutoff,
            "addresses": self.addresses,
            "removed": self.removed,
            "kept": self.kept,
        }


def prune_processed(root: Path, *, older_than: float, now: float) -> GardenCompactReport:
    """Delete processed messages older than `older_than` seconds under the garden `root`."""
    report = GardenCompactReport(now - older_than)
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        cur = Path(entry.path) / "cur"
        if not entry.is_dir() or not cur.is_dir():
            continue
        report.addresses += 1
        with os.scandir(cur) as files:
            for f in files:
                if f.name.startswith(".") or not f.is_file():
                    continue
                try:
                    if f.stat().st_mtime < report.cutoff:
                        os.unlink(f.path)
                        report.removed += 1
                    else:
                        report.kept += 1
                except FileNotFoundError:  # taken meanwhile (an archive, another pruner)
                    continue
    return report
