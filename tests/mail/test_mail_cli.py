"""`envelopay mail ...` through typer's CliRunner and one real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import Envelope
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.mail.mailbox import Mailbox
from envelopay.testing.dovecot import free_port, running_dovecot

ME = "agent@garden.test"
runner = CliRunner()
ENVELOPAY = str(Path(sys.executable).parent / "envelopay")  # the installed console script


def mail(n: int, subject: str, body: str, sender: str = "peer@example.test", **hdrs: str) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = ME
    msg["Subject"] = subject
    msg["Message-ID"] = f"<c{n}@example.test>"
    for k, v in hdrs.items():
        msg[k.replace("_", "-")] = v
    msg.set_content(body)
    return msg.as_bytes(policy=policy.SMTP)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    d = tmp_path / "agent"
    with Mailbox(d, address=ME) as box:
        box.deliver(mail(1, "first", "hello there"))
        box.deliver(mail(2, "invoice 7", "please pay", sender="boss@example.test"))
    return d


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def ids(agent_dir: Path, *extra: str) -> list[dict[str, object]]:
    code, out, err = run("mail", "check", "--dir", str(agent_dir), "--json", *extra)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_check_table_and_json_with_filters(agent_dir: Path) -> None:
    code, out, _ = run("mail", "check", "--dir", str(agent_dir))
    assert code == 0 and "invoice 7" in out and "first" in out and "boss@example.test" in out
    rows = ids(agent_dir, "--from", "boss")
    assert [r["subject"] for r in rows] == ["invoice 7"]
    rows = ids(agent_dir, "--sort", "oldest", "-n", "1", "--truncate", "3")
    assert [(r["subject"], r["preview"]) for r in rows] == [("first", "hel…")]


def test_usage_errors_exit_2_naming_the_field(agent_dir: Path) -> None:
    cases = [
        (("mail", "search", "(", "--dir", str(agent_dir)), "query"),
        (("mail", "check", "--after", "yesterday", "--dir", str(agent_dir)), "after"),
        (("mail", "check", "--after", "2026-11-30T10:00:00", "--dir", str(agent_dir)), "after"),
        (("mail", "check", "-n", "0", "--dir", str(agent_dir)), "n"),
        (("mail", "check", "--folder", "spam", "--dir", str(agent_dir)), "folder"),
        (("mail", "read", "nothere", "--dir", str(agent_dir)), "id"),
        (("mail", "contacts", "add", "a@example.test, b@example.test", "--dir", str(agent_dir)), "address"),
    ]
    for args, field in cases:
        code, _, err = run(*args)
        assert code == 2, (args, err)
        assert f"{field}:" in err, (args, err)
    code, out, _ = run("mail", "search", "(", "--dir", str(agent_dir), "--json")
    assert code == 2 and json.loads(out) == {
        "error": "invalid_regex",
        "field": "query",
        "detail": json.loads(out)["detail"],
        "exit": 2,
    }


def test_read_archive_delete_and_refusals(agent_dir: Path) -> None:
    first, second = (r["id"] for r in ids(agent_dir, "--sort", "oldest"))
    code, out, _ = run("mail", "read", str(first), "--dir", str(agent_dir))
    assert code == 0 and "hello there" in out
    assert [r["id"] for r in ids(agent_dir, "--unread-only")] == [second]
    code, out, _ = run("mail", "archive", str(first), "--dir", str(agent_dir), "--json")
    assert code == 0 and json.loads(out) == {"archived": [first]}
    assert [r["id"] for r in ids(agent_dir, "--folder", "archive")] == [first]
    with Mailbox(agent_dir, address=ME) as box:
        sent = box.deliver(mail(3, "mine", "x", sender=ME), folder="sent")
    code, _, err = run("mail", "delete", sent.id, str(second), "--dir", str(agent_dir))
    assert code == 2 and "id:" in err and "sent" in err
    assert len(ids(agent_dir)) == 1  # nothing was deleted
    code, out, _ = run("mail", "delete", str(first), str(second), "--dir", str(agent_dir))
    assert code == 0 and "2 deleted" in out
    assert ids(agent_dir) == [] and ids(agent_dir, "--folder", "archive") == []


def test_contacts_commands(agent_dir: Path) -> None:
    d = str(agent_dir)
    assert run("mail", "contacts", "add", "peer@example.test", "--name", "Peer", "--dir", d)[0] == 0
    assert run("mail", "contacts", "edit", "peer@example.test", "--note", "friendly", "--dir", d)[0] == 0
    code, out, _ = run("mail", "contacts", "list", "--dir", d, "--json")
    assert json.loads(out) == [{"address": "peer@example.test", "name": "Peer", "note": "friendly"}]
    code, out, _ = run("mail", "contacts", "list", "--dir", d)
    assert code == 0 and "friendly" in out
    assert run("mail", "contacts", "remove", "peer@example.test", "--dir", d)[0] == 0
    assert run("mail", "contacts", "remove", "peer@example.test", "--dir", d)[0] == 1
    code, _, err = run("mail", "contacts", "edit", "ghost@example.test", "--name", "x", "--dir", d)
    assert code == 2 and "address:" in err


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: object, session: object, envelope: Envelope) -> str:
        assert isinstance(envelope.content, bytes) and envelope.mail_from is not None
        self.got.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
def smtp_server() -> Iterator[tuple[Sink, int]]:
    sink = Sink()
    port = free_port()
    ctl = Controller(sink, hostname="127.0.0.1", port=port, decode_data=False)
    ctl.start()
    try:
        yield sink, port
    finally:
        ctl.stop()


def test_reply_sends_threaded_mail_and_thread_shows_it(
    agent_dir: Path, smtp_server: tuple[Sink, int]
) -> None:
    sink, port = smtp_server
    d = str(agent_dir)
    [parent] = [r for r in ids(agent_dir) if r["subject"] == "first"]
    smtp = ("--smtp", f"127.0.0.1:{port}", "--security", "none")
    code, _, err = run("mail", "reply", str(parent["id"]), "-m", "hi back", *smtp, "--dir", d)
    assert code == 2 and "address:" in err  # no own address configured
    env = {"ENVELOPAY_ADDRESS": ME}
    code, _, err = run("mail", "reply", str(parent["id"]), "-m", "hi back", "--dir", d, env=env)
    assert code == 2 and "smtp:" in err  # no transport configured
    code, _, err = run("mail", "reply", str(parent["id"]), "--dir", d, env=env)
    assert code == 2 and "message:" in err
    args = ("mail", "reply", str(parent["id"]), "-m", "hi back", "--smtp", f"127.0.0.1:{port}")
    code, out, err = run(*args, "--security", "none", "--dir", d, "--json", env=env)
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "sent"
    [(mail_from, rcpts, raw)] = sink.got
    assert (mail_from, rcpts) == (ME, ["peer@example.test"])
    msg = message_from_bytes(raw, policy=policy.default)
    assert msg["Subject"] == "Re: first" and msg["In-Reply-To"] == "<c1@example.test>"
    code, out, _ = run("mail", "thread", str(parent["id"]), "--dir", d, "--json")
    thread = json.loads(out)
    assert [t["folder"] for t in thread] == ["inbox", "sent"]
    assert thread[1]["id"] == result["id"] and thread[1]["references"] == ["<c1@example.test>"]
    # The same reply again is a duplicate send: refused before any I/O.
    code, _, err = run(*args, "--security", "none", "--dir", d, env=env)
    assert code == 2 and "message:" in err and "already sent" in err
    assert len(sink.got) == 1


def test_real_subprocess_check_json(agent_dir: Path) -> None:
    env = {**os.environ, "ENVELOPAY_AGENT_DIR": str(agent_dir)}
    proc = subprocess.run(
        [ENVELOPAY, "mail", "check", "--json", "--contains", "PAY"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert [r["subject"] for r in json.loads(proc.stdout)] == ["invoice 7"]
    bad = subprocess.run(
        [ENVELOPAY, "mail", "search", "[unclosed"],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and b"query:" in bad.stderr


def test_fetch_without_its_secret_is_the_environment(agent_dir: Path) -> None:
    """README's table: a secret not set is exit 3 (it was 2, bad input), before any connection."""
    args = ["mail", "fetch", "--imap", f"127.0.0.1:{free_port()}", "--user", "alice", "--dir", str(agent_dir),
            "--json"]
    res = runner.invoke(app, args, env={"ENVELOPAY_IMAP_PASSWORD": None})
    assert res.exit_code == 3, res.output
    doc = json.loads(res.stdout)
    assert (doc["error"], doc["field"], doc["exit"]) == ("config", "ENVELOPAY_IMAP_PASSWORD", 3)


def test_fetch_once_from_dovecot(tmp_path: Path) -> None:
    d = str(tmp_path / "agent")
    with running_dovecot() as server:
        server.deliver("alice", mail(11, "from imap", "over the wire"))
        args = ("mail", "fetch", "--imap", f"{server.host}:{server.imap_port}", "--user", "alice", "--no-tls")
        code, _, err = run(*args, "--dir", d)
        assert code == 3 and "ENVELOPAY_IMAP_PASSWORD: not set" in err  # a secret not set: the environment
        env = {"ENVELOPAY_IMAP_PASSWORD": "secret"}
        code, out, err = run(*args, "--dir", d, "--json", env=env)
        assert code == 0, err
        assert json.loads(out) == {"stored": 1}
        code, out, _ = run(*args, "--dir", d, "--json", env=env)
        assert json.loads(out) == {"stored": 0}  # flagged on the server: not fetched twice
        code, _, err = run(*args, "--dir", d, env={"ENVELOPAY_IMAP_PASSWORD": "wrong"})
        assert code == 3 and "login refused" in err  # the environment: its credential
    with Mailbox(Path(d)) as box:
        assert [r.subject for r in box.check()] == ["from imap"]


def test_fetch_idle_subprocess_picks_up_pushed_mail(tmp_path: Path) -> None:
    import signal
    import time

    d = tmp_path / "agent"
    with running_dovecot() as server:
        env = {**os.environ, "ENVELOPAY_IMAP_PASSWORD": "secret", "ENVELOPAY_AGENT_DIR": str(d)}
        proc = subprocess.Popen(
            [
                ENVELOPAY,
                "mail",
                "fetch",
                "--imap",
                f"{server.host}:{server.imap_port}",
                "--user",
                "alice",
                "--no-tls",
                "--idle",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            assert b"IDLE" in proc.stderr.readline()  # started; mail from now on must arrive
            server.deliver("alice", mail(21, "pushed", "arrived while idling"))
            deadline = time.monotonic() + 60
            subjects: list[str] = []
            while time.monotonic() < deadline and subjects != ["pushed"] and proc.poll() is None:
                if (d / "mailbox" / "index.sqlite3").exists():
                    with Mailbox(d) as box:
                        subjects = [r.subject for r in box.check()]
                time.sleep(0.1)  # polling the filesystem, not synchronising with the process
            assert subjects == ["pushed"], proc.poll()
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and b"1 message(s) stored" in out, err.decode()


def test_config_gives_dir_address_and_garden_inbox(tmp_path: Path, smtp_server: tuple[Sink, int]) -> None:
    from envelopay.mail.maildir import deliver_file, ensure_maildir, mailbox_path

    sink, port = smtp_server
    work = tmp_path / "worker"
    work.mkdir()
    (work / "envelopay.toml").write_text(
        f'[agent]\naddress = "{ME}"\ndomain = "garden.test"\n\n'
        '[transport]\nkind = "garden"\ngarden_root = "g"\n'
    )
    garden_inbox = ensure_maildir(mailbox_path(work / "g", ME))
    deliver_file(garden_inbox, mail(31, "via the garden", "hello"), fsync=False)
    cfg = str(work / "envelopay.toml")
    rows = json.loads(run("mail", "check", "--config", cfg, "--json")[1])
    assert [r["subject"] for r in rows] == ["via the garden"]
    assert (work / "mailbox" / "index.sqlite3").is_file()  # the config's directory is the agent dir
    # The config's address is the sender of a reply (no --address, no env).
    smtp = ("--smtp", f"127.0.0.1:{port}", "--security", "none")
    code, _, err = run("mail", "reply", str(rows[0]["id"]), "-m", "ok", *smtp, "--config", cfg, "--json")
    assert code == 0, err
    assert sink.got[0][0] == ME
    code, _, err = run("mail", "check", "--config", str(work / "missing.toml"))
    assert code == 2 and "config:" in err
