"""Retention of the mailbox's send log (`Mailbox.compact_sends`, `envelopay mail compact`):
rows older than the window go, in batches, oldest first; the loop guard's window is never
cut (a shorter retention is refused, nothing removed), so a duplicate is still refused
after compaction; sent mail itself stays. A real index file, read back with sqlite3."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.mail.mailbox import CheckFilter, Mailbox, MailboxError, OutgoingMail, SendResult
from envelopay.mail.mailbox.guard import SendGuard

from .test_mailbox import ME, Clock

DAY = 86_400


async def _sent(out: OutgoingMail) -> SendResult:
    return SendResult("sent")


async def _failed(out: OutgoingMail) -> SendResult:
    return SendResult("failed", "refused")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def box(tmp_path: Path, clock: Clock) -> Iterator[Mailbox]:
    mb = Mailbox(tmp_path / "agent", address=ME, now=clock)
    yield mb
    mb.close()


def _log(box: Mailbox) -> list[tuple[str, str]]:
    with sqlite3.connect(box.root / "index.sqlite3") as db:
        return [(r, s) for r, s in db.execute("SELECT recipient, status FROM sends ORDER BY seq")]


async def test_old_rows_go_and_the_guard_still_refuses_within_its_window(box: Mailbox, clock: Clock) -> None:
    for day in range(5):  # one sent and one failed send a day, the last one today
        await box.send(_sent, f"d{day}@example.test", "s", "same body")
        await box.send(_failed, f"f{day}@example.test", "s", "other body")
        clock.tick(DAY if day < 4 else 60)
    assert len(_log(box)) == 10
    assert box.compact_sends(timedelta(days=2)) == 6  # days 0, 1 and 2 (each over 2 days old)
    assert _log(box) == [("d3@example.test", "sent"), ("f3@example.test", "failed"),
                         ("d4@example.test", "sent"), ("f4@example.test", "failed")]
    assert box.compact_sends(timedelta(days=2)) == 0  # idempotent
    with pytest.raises(MailboxError) as err:  # today's send is still remembered by the guard
        await box.send(_sent, "d4@example.test", "again", "same body")
    assert err.value.code == "duplicate_send"
    assert len(box.check("sent", CheckFilter(n=50))) == 5  # the mail itself is not the log's


async def test_a_retention_shorter_than_the_duplicate_window_is_refused(box: Mailbox, clock: Clock) -> None:
    await box.send(_sent, "peer@example.test", "s", "body")
    clock.tick(1800)
    with pytest.raises(MailboxError) as err:
        box.compact_sends(timedelta(minutes=10))
    assert (err.value.code, err.value.field) == ("invalid_retention", "older_than")
    assert len(_log(box)) == 1
    with pytest.raises(MailboxError):  # still refused as a duplicate: nothing was removed
        await box.send(_sent, "peer@example.test", "s", "body")
    box.duplicate_window = None  # no guard: any retention goes
    assert box.compact_sends(timedelta(minutes=10)) == 1 and _log(box) == []


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 100])
def test_prune_walks_in_batches_and_stops_at_the_first_newer_row(tmp_path: Path, batch: int) -> None:
    db = sqlite3.connect(tmp_path / "log.sqlite3", isolation_level=None)
    clock = Clock()
    guard = SendGuard(db, None, clock)
    # Times as written, with a clock set back once: 100..104, then 50 (older), then 200.
    for ts in [100, 101, 102, 103, 104, 50, 200]:
        db.execute("INSERT INTO sends (recipient, body_hash, ts, status) VALUES ('r', 'h', ?, 'sent')", (ts,))
    assert guard.prune(103, batch=batch) == 3  # 100, 101, 102
    assert guard.prune(150, batch=batch) == 3  # 103, 104 and the set-back 50
    assert [r[0] for r in db.execute("SELECT ts FROM sends")] == [200]
    assert guard.prune(0, batch=batch) == 0


def test_mail_compact_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    where = ["--dir", str(tmp_path / "agent"), "--json"]
    assert runner.invoke(app, ["mail", "check", *where]).exit_code == 0  # compact never makes the mailbox
    res = runner.invoke(app, ["mail", "compact", *where, "--older-than", "30"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"command": "mail compact", "ok": True, "exit": 0, "removed": 0}
    short = runner.invoke(app, ["mail", "compact", *where, "--older-than", "0.01"])  # 14.4 min < 1 h
    assert short.exit_code == 2 and "invalid_retention" in short.output, short.output
    assert runner.invoke(app, ["mail", "compact", *where, "--older-than", "-1"]).exit_code == 2
