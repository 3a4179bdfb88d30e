"""Garden retention: processed mail older than the window goes; unprocessed never."""

from __future__ import annotations

import os
import time
from pathlib import Path

from envelopay.mail.maildir import deliver_file, ensure_maildir
from envelopay.mail.retention import prune_processed


def test_prune_removes_old_processed_mail_only(tmp_path: Path) -> None:
    now = time.time()
    boxes = [ensure_maildir(tmp_path / f"a{i}@garden.test") for i in range(3)]
    old = []
    for b in boxes:
        for age in (40, 1):  # days
            path = deliver_file(b, f"Subject: {age}\r\n\r\nx\r\n".encode())
            done = b / "cur" / f"{path.name}:2,S"
            os.rename(path, done)
            os.utime(done, (now - age * 86400, now - age * 86400))
            if age == 40:
                old.append(done)
        waiting = deliver_file(b, b"Subject: unprocessed\r\n\r\nx\r\n")
        os.utime(waiting, (now - 90 * 86400, now - 90 * 86400))
    (tmp_path / "stray-file").write_text("not a maildir")
    report = prune_processed(tmp_path, older_than=30 * 86400, now=now)
    assert (report.addresses, report.removed, report.kept) == (3, 3, 3)
    assert not any(p.exists() for p in old)
    assert all(len(os.listdir(b / "new")) == 1 and len(os.listdir(b / "cur")) == 1 for b in boxes)
