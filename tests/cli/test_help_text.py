"""What `--help` shows a new user (issue 30 item 5): a plain flag takes no value, so it
shows no metavar (`--json <bool>` read as if it wanted one); options that take a value
keep theirs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
from typer.testing import CliRunner

from envelopay.cli.app import app

runner = CliRunner()


def _paths(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _paths(sub, (*path, name))


def test_no_help_shows_a_metavar_for_a_plain_flag() -> None:
    paths = list(_paths(typer.main.get_command(app)))
    assert len(paths) > 40
    bad = []
    for path in paths:
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert res.exit_code == 0, (path, res.output)
        if "<bool>" in res.output:
            bad.append(" ".join(path) or "envelopay")
    assert bad == []


def test_options_taking_a_value_keep_their_metavar() -> None:
    res = runner.invoke(app, ["init", "--help"], env={"COLUMNS": "200"})
    flags = {line.split()[1]: line for line in res.output.splitlines() if line.startswith("│ --")}
    assert "<str>" in flags["--address"] and "<path>" in flags["--dir"]
    assert flags["--json"].split()[2] != "<bool>" and "--help" in flags
