"""Every `envelopay …` line in README's Usage code blocks parses against the real CLI
(issue 15): the command exists, every option it shows is one the command accepts, and
its required arguments are there. Lines of the client block also run against a garden
world with a served worker (tests/agent/test_cli_client.py::test_readme_client_lines_run).

A line that needs the network or a service, or shows syntax rather than a command
(`a|b`, `ID...`, `[--idle]`), ends in a comment containing `(syntax)` or `(service)`;
those are still checked for their command path, the rest fully parsed."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer

from envelopay.cli.app import app

README = Path(__file__).resolve().parents[1] / "README.md"


def usage_lines(text: str | None = None) -> list[str]:
    """The `envelopay …` lines of the fenced blocks between "## Usage" and the next "## "."""
    text = text or README.read_text(encoding="utf-8")
    usage = text.split("\n## Usage", 1)[1].split("\n## ", 1)[0]
    lines: list[str] = []
    fence: str | None = None  # the open block's language, None outside a block
    pending = ""
    for raw in usage.splitlines():
        if raw.startswith("```"):
            fence = None if fence is not None else raw[3:].strip()
            continue
        if fence not in ("", "sh", "bash", "console"):
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        m = re.search(r"(?:^|\s)(envelopay\s.*)$", line)
        if m:
            lines.append(m.group(1))
    return lines


def split(line: str) -> tuple[list[str], str]:
    """The argv of a README line (comment and shell redirections dropped) and its comment."""
    code, _, comment = line.partition(" #")
    code = re.split(r"\s[<>|]\s", code)[0]
    return shlex.split(code)[1:], comment


def resolve(argv: list[str]) -> tuple[Any, list[str]]:
    """The (sub)command a line names and the arguments left for it (typer ships its own
    click, so commands are told apart from groups by their `commands`)."""
    cmd: Any = typer.main.get_command(app)
    while hasattr(cmd, "commands") and argv and argv[0] in cmd.commands:
        cmd, argv = cmd.commands[argv[0]], argv[1:]
    return cmd, argv


def test_the_readme_has_client_lines() -> None:
    lines = usage_lines()
    assert any(line.startswith("envelopay pay ") for line in lines)
    assert any(line.startswith("envelopay offer ") for line in lines)


def test_every_usage_line_names_a_command_and_parses() -> None:
    bad = []
    for line in usage_lines():
        argv, comment = split(line)
        cmd, rest = resolve(argv)
        if "(syntax)" in comment or "(service)" in comment:
            if rest == argv:  # not even the first word is a command
                bad.append(f"{line}: no such command")
            continue
        if hasattr(cmd, "commands"):
            bad.append(f"{line}: no such command")
            continue
        try:
            cmd.make_context(cmd.name or "envelopay", list(rest), resilient_parsing=False)
        except Exception as exc:  # click's UsageError family: the line does not parse
            if type(exc).__name__ != "Exit":
                bad.append(f"{line}: {getattr(exc, 'format_message', exc.__str__)()}")
    assert bad == []
