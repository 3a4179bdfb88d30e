"""`mail check` and `mail read` show when a mail was written — its Date header — not when
this mailbox first indexed it (seen on a new-user walk: a `mail check` run first at 00:03
dated every mail 00:03, a PAY written at 00:00:16 among them). `--json` keeps the
index's `date`, the order the mailbox lists in."""

from __future__ import annotations

import json
from email import policy
from email.message import EmailMessage
from pathlib import Path

from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.mail.mailbox import Mailbox

ME = "agent@garden.test"
WRITTEN = "Mon, 30 Nov 2026 10:00:00 +0100"  # 09:00 UTC, days before the test runs


def _mail(n: int, date: str | None) -> bytes:
    msg = EmailMessage()
    msg["From"] = "peer@example.test"
    msg["To"] = ME
    msg["Subject"] = f"hello {n}"
    msg["Message-ID"] = f"<d{n}@example.test>"
    if date is not None:
        msg["Date"] = date
    msg.set_content("hi")
    return msg.as_bytes(policy=policy.SMTP)


def test_the_date_a_person_reads_is_the_mails_own(tmp_path: Path) -> None:
    with Mailbox(tmp_path / "a", address=ME) as box:
        box.deliver(_mail(1, WRITTEN))
        box.deliver(_mail(2, None))  # no Date: when it was taken in
    runner = CliRunner()
    shown = runner.invoke(app, ["mail", "check", "--dir", str(tmp_path / "a")], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "2026-11-30 09:00" in shown.stdout
    [first] = [line for line in shown.stdout.splitlines() if "hello 1" in line]
    assert "2026-11-30 09:00" in first
    doc = runner.invoke(app, ["mail", "check", "--dir", str(tmp_path / "a"), "--json"])
    listed = {m["subject"]: m for m in json.loads(doc.stdout)}
    ids = {subject: m["id"] for subject, m in listed.items()}
    # --json: `written` the header's time in UTC, `indexed` and `date` the index's.
    assert listed["hello 1"]["written"] == "2026-11-30T09:00:00+00:00"
    assert listed["hello 2"]["written"] is None
    assert all(m["indexed"] == m["date"] and m["indexed"] > "2026-12" for m in listed.values())
    [second] = [line for line in shown.stdout.splitlines() if "hello 2" in line]
    assert "indexed" in second and "indexed" not in first  # no Date: the index's time, marked
    read = runner.invoke(app, ["mail", "read", ids["hello 1"], "--dir", str(tmp_path / "a")],
                         terminal_width=200)
    assert read.exit_code == 0, read.output
    assert f"Date: {WRITTEN}" in read.stdout
