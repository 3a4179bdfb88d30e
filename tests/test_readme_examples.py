"""README's Usage examples run as written (issue 15).

Every `sh` block of the Usage part names the world it runs in (tests/readme_run.py says
how a block is read): `scratch` (an empty directory standing for your clone: fixtures/ is
linked in), `devnet` (an empty directory; the blocks themselves start `envelopay devnet up`,
the agents and the worker), or `tests/…`, a test that runs that block as written against
the service it needs (Postfix, AgentMail, IMAP, the two-terminals devnet). Each world's
blocks run as one bash session; every line's exit code is checked against the one README
states.

Substitutions, and why: `envelopay` is this interpreter's `python -m envelopay.cli` and
`python` this interpreter (shims first on PATH: the venv a reader would have activated);
HOME and the devnet's home are the test's own directory and the devnet's ports are left to
the system ($ENVELOPAY_DEVNET_*_PORT=0), so concurrent runs do not meet; PYTHONUNBUFFERED=1,
so a background service's "listening" line shows when it is printed. The one port README
fixes, the SMTP sink's (127.0.0.1:2587 in the mail example, since `mail reply --smtp` must be
told it), becomes a port the system chose for this run: two runs at once (two checkouts,
two helpers) would otherwise meet on it and one sink would fail to bind.

A session's timeout guards against a hang, not against slowness: a scratch session is about
fifty CLI processes (≈25 s on an idle machine) and a loaded 2-CPU machine stretches that
several times, so the limits are far beyond any run that is merely slow.

Every line is also parsed against the real CLI, `(syntax)` lines for their command path."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import typer
from tests import readme_run as rr

from envelopay.cli.app import app

WORLDS = ("scratch", "devnet")


def resolve(argv: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command a line names and the arguments left for it (typer ships its own
    click, so commands are told apart from groups by their `commands`)."""
    cmd: Any = typer.main.get_command(app)
    while hasattr(cmd, "commands") and argv and argv[0] in cmd.commands:
        cmd, argv = cmd.commands[argv[0]], argv[1:]
    return cmd, argv


def test_every_usage_block_names_its_world() -> None:
    bad = [f"README.md:{b.number}: no <!-- readme-run: … --> marker" for b in rr.blocks()
           if b.world not in WORLDS and not (b.world.startswith("tests/") and (rr.ROOT / b.world).is_file())]
    assert bad == []
    names = {b.world for b in rr.blocks()}
    assert set(WORLDS) <= names


def test_the_readme_has_client_lines() -> None:
    argvs = [a for b in rr.blocks() if b.world == "devnet"
             for line in b.lines for a in rr.envelopay_argvs(line)]
    for command in ("which", "order", "pay", "invoice", "offer", "accept", "fulfill", "oops", "flows", "show",
                    "outbox", "drain", "verify", "pay-onchain"):
        assert [command] in [a[:1] for a in argvs], command


def test_every_usage_line_names_a_command_and_parses() -> None:
    bad = []
    for block in rr.blocks():
        for line in block.lines:
            for argv in rr.envelopay_argvs(line):
                cmd, rest = resolve(argv)
                where = f"README.md:{line.number}: {line.text}"
                if line.syntax:
                    if rest == argv:  # not even the first word is a command
                        bad.append(f"{where}: no such command")
                    continue
                if hasattr(cmd, "commands"):
                    bad.append(f"{where}: no such command")
                    continue
                try:
                    cmd.make_context(cmd.name or "envelopay", list(rest), resilient_parsing=False)
                except Exception as exc:  # click's UsageError family: the line does not parse
                    if type(exc).__name__ != "Exit" and line.expect != 2:
                        bad.append(f"{where}: {getattr(exc, 'format_message', exc.__str__)()}")
    assert bad == []


def test_syntax_lines_are_few_and_say_why() -> None:
    """`(syntax)` is kept for lines that show alternatives or optional parts (`a|b`, `[--x]`,
    `ID...`) or need an account on a real server; each one says so on its line."""
    lines = [line for b in rr.blocks() for line in b.lines if line.syntax]
    assert len(lines) <= 6, [line.text for line in lines]
    for line in lines:
        assert any(mark in line.code for mark in ("|", "[", "...")), line.text


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    return rr.shell_env(tmp_path)


SMTP_SINK = "127.0.0.1:2587"  # README's local SMTP sink (the mail example)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(world: str, cwd: Path, env: dict[str, str], timeout: float) -> None:
    blocks = [b for b in rr.blocks() if b.world == world]
    assert blocks
    text = rr.script(blocks)
    if SMTP_SINK in text:  # the sink and the reply that uses it, on a port of this run's own
        text = text.replace(SMTP_SINK, f"127.0.0.1:{_free_port()}")
    ran = rr.run_session(text, cwd, env, timeout)
    if ran.timed_out:
        pytest.fail(f"the {world} session did not end in {timeout:g} s:\n{ran.out[-6000:]}")
    print(ran.out)  # the session, line by line with its start time (pytest -s shows it)
    assert ran.returncode == 0 and "+ all README lines ran" in ran.out, ran.out[-8000:]


def test_scratch_blocks_run(tmp_path: Path, shell_env: dict[str, str]) -> None:
    where = tmp_path / "clone"
    where.mkdir()
    (where / "fixtures").symlink_to(rr.ROOT / "fixtures")
    _session("scratch", where, shell_env, timeout=900)


def test_devnet_blocks_run(tmp_path: Path, shell_env: dict[str, str]) -> None:
    where = tmp_path / "work"
    where.mkdir()
    try:
        _session("devnet", where, shell_env, timeout=900)
    finally:
        rr.devnet_down(where, shell_env)
    assert not (tmp_path / "devnet" / "devnet.json").exists()
