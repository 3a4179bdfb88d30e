"""README's exit-code table, row by row, against the real CLI; and the one table in
cli/output.py (EXIT_CODES) that every command's errors go through."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.cli.operator import decision_exit
from envelopay.cli.output import ENVIRONMENT, EXIT_CODES, FAILED, OK, USAGE, delivery_exit, exit_of
from envelopay.enforcer.client.http_client import EnforcerClient
from envelopay.errors import ConfigError, RailError, Refused, StoreError, TransportError, UsageError
from envelopay.mail.mailbox import MailboxError

from .conftest import WORKER, World, free_port, serve, stop

README = Path(__file__).resolve().parents[2] / "README.md"
runner = CliRunner()


def run(*args: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, [*args, "--json"])
    return res.exit_code, json.loads(res.stdout)


def readme_rows() -> dict[int, str]:
    """The exit-code table of README's "Output and exit codes"."""
    text = README.read_text()
    table = text[text.index("| exit | meaning |"):].split("\n\n", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d) \| (.+?) \|$", table, re.M)}


def test_the_readme_table_has_the_four_codes_and_names_what_each_covers() -> None:
    rows = readme_rows()
    assert sorted(rows) == [OK, FAILED, USAGE, ENVIRONMENT]
    assert "OOPS" in rows[FAILED] and "timeout" in rows[FAILED]
    assert "nothing sent and nothing paid" in rows[USAGE]
    for words in ("short of funds", "unreachable", "configuration error"):
        assert words in rows[ENVIRONMENT]


@pytest.mark.parametrize(("error", "code"), [
    (UsageError("--amount: must be digits"), USAGE),
    (MailboxError("not_found", "no message 7", "ID"), USAGE),
    (Refused("the peer has not said it takes the pair"), FAILED),
    (ConfigError("no such config"), ENVIRONMENT),
    (RailError("insufficient_funds", "short by 5"), ENVIRONMENT),
    (TransportError("SMTP unreachable"), ENVIRONMENT),
    (StoreError("ledger locked"), ENVIRONMENT),
])
def test_one_table_maps_each_error_kind_to_its_code(error: Exception, code: int) -> None:
    assert exit_of(error)[0] == code  # type: ignore[arg-type]
    assert any(isinstance(error, kind) for kind, _, _ in EXIT_CODES)


def test_a_mailbox_refusal_keeps_its_code_word_and_a_rail_its_reason() -> None:
    assert exit_of(MailboxError("not_found", "no message 7", "ID")) == (USAGE, "not_found")
    assert exit_of(RailError("insufficient_funds")) == (ENVIRONMENT, "insufficient_funds")


@pytest.mark.parametrize(("detail", "code"), [
    ("delivery failed: smtp permanent_failure: (550, 'no such user')", FAILED),
    ("delivery failed: garden refused bob@x.test: 550 5.1.1 unknown", FAILED),
    ("delivery failed: smtp temporary_failure: connection refused", ENVIRONMENT),
    ("delivery failed: garden /tmp/x.sock: [Errno 2] No such file or directory", ENVIRONMENT),
])
def test_undelivered_mail_is_the_peer_or_the_environment(detail: str, code: int) -> None:
    assert delivery_exit(detail) == code
    assert decision_exit("approve", {"ok": False, "state": "FAILED", "detail": detail}) == code


def test_decisions_that_did_what_was_asked_exit_0() -> None:
    assert decision_exit("approve", {"ok": True, "state": "SENT", "detail": ""}) == OK
    assert decision_exit("reject", {"ok": True, "state": "REJECTED", "detail": ""}) == OK
    assert decision_exit("approve", {"ok": False, "state": "FAILED",
                                     "detail": "agent killed before execution"}) == FAILED


# -- each row of the table, from the CLI ----------------------------------------------------


def test_row_0_the_flow_moved_as_asked(world: World) -> None:
    code, doc = run("which", WORKER, "-c", str(world.ccfg), "--wait", "--timeout", "60")
    assert code == OK and doc["ok"] and doc["answer"]["type"] == "methods" and doc["delivery"] == "sent"


def test_row_1_the_peer_answered_oops(world: World) -> None:
    code, doc = run("order", WORKER, "--task", '{"name": "nope"}', "-c", str(world.ccfg), "--wait",
                    "--timeout", "60")
    assert code == FAILED and doc["oops"]["code"] == "unknown_task" and doc["exit"] == FAILED


def test_row_2_bad_input_names_the_field_and_sends_nothing(world: World) -> None:
    before = run("outbox", "-c", str(world.ccfg))[1]["queued"]
    for args, field in ((["pay", WORKER, "--amount", "-1", "--token", "USDC", "--chain", "solana-local",
                          "--wallet", "11111111111111111111111111111111"], "--amount"),
                        (["which", WORKER, "--timeout", "-1", "--wait"], "--timeout"),
                        (["order", WORKER, "--task", "[1]"], "--task"),
                        (["which", WORKER, "--timeout", "soon"], "--timeout")):
        code, doc = run(*args, "-c", str(world.ccfg))
        assert code == USAGE and doc["field"] == field and doc["exit"] == USAGE, (args, doc)
        assert "Input should" not in doc["detail"]  # the project's words, not the converter's
    assert run("outbox", "-c", str(world.ccfg))[1]["queued"] == before


def test_row_3_the_environment(world: World, tmp_path: Path) -> None:
    code, doc = run("which", WORKER, "-c", str(tmp_path / "missing.toml"))
    assert code == ENVIRONMENT and doc["error"] == "config"
    # The transport down: the mail stays queued, and the document says so.
    down = tmp_path / "client"
    shutil.copytree(world.ccfg.parent, down, ignore=shutil.ignore_patterns("*.sock"))
    cfg = down / "envelopay.toml"
    cfg.write_text(cfg.read_text().replace(str(world.garden_sock), str(tmp_path / "no.sock")))
    code, doc = run("which", WORKER, "-c", str(cfg))
    assert code == ENVIRONMENT and doc["queued"] is True and doc["delivery"] == "queued"


async def _held(url: str, token: str, sender: str, *recipients: str) -> list[str]:
    async with EnforcerClient(url, token) as agent:
        held = [await agent.send({"to": to, "from": sender, "subject": "hi"}) for to in recipients]
    assert all(h.status == "pending_approval" for h in held), held
    return [h.approval_id or "" for h in held]


def test_an_approved_send_that_fails_exits_1_refused_or_3_environment(world: World, tmp_path: Path) -> None:
    code, made = run("agent", "create", "ops", "--address", "ops@agents.test", *world.operator)
    assert code == OK
    url = world.enforcer.ready["listening"]
    ok, refused = asyncio.run(_held(url, made["token"], "ops@agents.test", "ok@partner.test",
                                    "refuse@partner.test"))
    code, doc = run("approvals", "approve", ok, *world.operator)
    assert code == OK and doc["state"] == "SENT" and doc["delivered"] is True
    code, doc = run("approvals", "approve", refused, *world.operator)  # the peer's SMTP: 550
    assert code == FAILED and doc["state"] == "FAILED" and doc["delivered"] is False
    assert doc["ok"] is False and "550" in doc["detail"]
    # An enforcer whose SMTP server is not there: the environment.
    other = serve(["enforcer", "serve", "--db", f"sqlite:///{tmp_path}/e2.db", "--port", str(free_port()),
                   "--operator-token-file", str(tmp_path / "op2.token"), "--smtp-host", "127.0.0.1",
                   "--smtp-port", str(free_port()), "--smtp-security", "none"])
    try:
        op = ["--enforcer", other.ready["listening"], "--operator-token-file", str(tmp_path / "op2.token")]
        code, made = run("agent", "create", "late", "--address", "late@agents.test", *op)
        assert code == OK
        (later,) = asyncio.run(_held(other.ready["listening"], made["token"], "late@agents.test",
                                     "later@partner.test"))
        code, doc = run("approvals", "approve", later, *op)
        assert code == ENVIRONMENT and doc["state"] == "FAILED" and doc["delivered"] is False, doc
        code, doc = run("approvals", "approve", later, *op)  # decided already: a conflict, 1
        assert code == FAILED and doc["error"] == "conflict"
    finally:
        assert stop(other) == 0


@pytest.mark.parametrize(("args", "field", "words"), [
    (["mail", "check", "-n", "many"], "-n", "wants a whole number, got 'many'"),
    (["approvals", "list", "--limit", "0"], "--limit", "wants at least 1, got '0'"),
    (["ledger", "compact", "--older-than", "-1"], "--older-than", "wants at least 0.0"),
    (["agent", "create", "x", "--address", "a@b.test", "--hourly", "lots"], "--hourly",
     "wants a whole number"),
    (["agent", "create", "x", "--address", "a@b.test", "--spend", "bogus"], "--spend", "CHAIN/TOKEN=AMOUNT"),
    (["version", "--bogus"], None, "No such option"),
])
def test_command_line_refusals_name_the_field_in_project_words(args: list[str], field: str | None,
                                                              words: str) -> None:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == USAGE
    doc = json.loads(res.stdout)
    assert doc["field"] == field and words in doc["detail"] and doc["exit"] == USAGE, doc
    assert "Input should" not in res.stdout + res.stderr


def test_without_json_a_refusal_prints_nothing_on_stdout() -> None:
    for args in (["version", "--bogus"], ["approvals", "list", "--limit", "0"], ["which", "NOT AN ADDRESS"]):
        res = runner.invoke(app, args)
        assert res.exit_code == USAGE and res.stdout == "", (args, res.stdout)
