"""`envelopay mail check` shows what the worker did with each mail of its inbox (issue 30,
item 4): mail that is not protocol shows with its reason, read from the worker's ledger
named by the config. Before: the mail was listed with nothing to say it was never read
as a request (and the worker kept no record of it)."""

from __future__ import annotations

import json
from pathlib import Path

from tests._engines import worker
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.ledger.sqlite import SqliteStore
from envelopay.mail.maildir import deliver_file, ensure_maildir, mailbox_path
from envelopay.node.agent_node import answer_limits
from envelopay.testing import mock_rail as k

runner = CliRunner()


def prose() -> bytes:
    return (
        f"From: ann@garden.test\r\nTo: {k.WORKER}\r\nSubject: Hello, what do you do?\r\n"
        "Message-ID: <prose1@garden.test>\r\nDate: Mon, 30 Nov 2026 12:00:00 +0000\r\n\r\n"
        "Hi, can you count words for me?\r\n"
    ).encode()


def served() -> bytes:
    return k.raw(k.order("ord_cli"), sender="ann@garden.test", message_id="<order1@garden.test>")


async def test_mail_check_shows_prose_with_the_workers_reason(tmp_path: Path) -> None:
    work = tmp_path / "worker"
    (work / "var").mkdir(parents=True)
    cfg = work / "envelopay.toml"
    cfg.write_text(
        f'[agent]\naddress = "{k.WORKER}"\ndomain = "garden.test"\nledger = "var/worker.db"\n\n'
        '[transport]\nkind = "garden"\ngarden_root = "g"\n'
    )
    inbox = ensure_maildir(mailbox_path(work / "g", k.WORKER))
    store = SqliteStore(work / "var" / "worker.db")
    try:
        eng = worker(store, k.DictRail())
        for raw in (prose(), served()):
            deliver_file(inbox, raw, fsync=False)
            await eng.handle(raw)
    finally:
        store.close()

    result = runner.invoke(app, ["mail", "check", "--config", str(cfg), "--json"])
    assert result.exit_code == 0, result.stderr
    rows = {r["subject"]: r for r in json.loads(result.stdout)}
    assert rows["Hello, what do you do?"]["handled"] == {
        "status": "ignored",
        "detail": "not protocol: subject is not `TYPE` or `TYPE | note`",
        "oops": None,
        "unanswered": None,
    }
    assert rows["ORDER"]["handled"]["status"] == "processed"

    wide = {"COLUMNS": "400"}
    table = runner.invoke(app, ["mail", "check", "--config", str(cfg), "-n", "5"], env=wide)
    assert table.exit_code == 0, table.stderr
    assert "(not protocol: subject is not `TYPE` or `TYPE | note`) Hi, can you" in table.stdout


def test_mail_check_without_a_ledger_creates_none(tmp_path: Path) -> None:
    work = tmp_path / "worker"
    work.mkdir()
    cfg = work / "envelopay.toml"
    cfg.write_text(
        f'[agent]\naddress = "{k.WORKER}"\ndomain = "garden.test"\nledger = "var/worker.db"\n\n'
        '[transport]\nkind = "garden"\ngarden_root = "g"\n'
    )
    deliver_file(ensure_maildir(mailbox_path(work / "g", k.WORKER)), prose(), fsync=False)
    result = runner.invoke(app, ["mail", "check", "--config", str(cfg), "--json"])
    assert result.exit_code == 0, result.stderr
    assert [r.get("handled", "absent") for r in json.loads(result.stdout)] == ["absent"]
    assert not (work / "var" / "worker.db").exists()


def test_help_is_off_by_default_and_on_by_the_answers_section(tmp_path: Path) -> None:
    base = f'[agent]\naddress = "{k.WORKER}"\ndomain = "garden.test"\n'
    (tmp_path / "off.toml").write_text(base)
    (tmp_path / "on.toml").write_text(base + "\n[answers]\nhelp = true\n")
    assert answer_limits(load_config(tmp_path / "off.toml")).help is False
    assert answer_limits(load_config(tmp_path / "on.toml")).help is True
