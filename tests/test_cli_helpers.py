"""The CLI's shared helpers: option sets spliced into a command's signature, and the one
error/output contract (cli/options.py, cli/output.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import typer
import typer.main
from typer.testing import CliRunner

from envelopay.cli.options import OptionSet, option
from envelopay.cli.output import ENVIRONMENT, USAGE, answers, emit_or_say, fail
from envelopay.errors import ConfigError, TransportError, UsageError


@dataclass(frozen=True)
class Where:
    place: str
    as_json: bool


_PLACE = option("place", Annotated[str, typer.Option("--place", help="Where.")], "here")
_JSON = option("as_json", Annotated[bool, typer.Option("--json", help="JSON.")], False)
AFTER = OptionSet((_PLACE, _JSON), Where)
BEFORE = OptionSet((_PLACE, _JSON), Where, first=True)


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.command("after")
    @AFTER
    def after(where: Where, name: Annotated[str, typer.Argument()], n: int = 1) -> None:
        emit_or_say(where.as_json, {"place": where.place, "name": name, "n": n}, f"{name}@{where.place}x{n}")

    @app.command("before")
    @BEFORE
    def before(where: Where, name: Annotated[str, typer.Option("--name")]) -> None:
        typer.echo(f"{name}@{where.place}")

    @app.command("boom")
    def boom(kind: str) -> None:
        with answers(transport_prefix="transport: "):
            if kind == "usage":
                raise UsageError("--x: bad")
            if kind == "config":
                raise ConfigError("config: bad")
            if kind == "transport":
                raise TransportError("down")
        fail("--y: wrong", as_json=True, error="invalid_field", field="y")

    return app


def test_an_option_set_reaches_the_command_as_one_value() -> None:
    runner = CliRunner()
    res = runner.invoke(_app(), ["after", "bob", "--place", "there", "--n", "3"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "bob@therex3"
    res = runner.invoke(_app(), ["after", "bob", "--json"])
    assert json.loads(res.output) == {"place": "here", "name": "bob", "n": 1}


def test_an_option_set_goes_after_or_before_the_commands_own_options() -> None:
    group = typer.main.get_command(_app())
    after = [p.name for p in group.commands["after"].params]  # type: ignore[attr-defined]
    before = [p.name for p in group.commands["before"].params]  # type: ignore[attr-defined]
    assert after == ["name", "n", "place", "as_json"]
    assert before == ["place", "as_json", "name"]
    res = CliRunner().invoke(_app(), ["before", "--name", "al", "--place", "x"])
    assert res.output.strip() == "al@x"


def test_errors_become_exit_codes_and_a_json_error_document() -> None:
    runner = CliRunner()
    for kind, code, text in (("usage", USAGE, "error: --x: bad"),
                             ("config", ENVIRONMENT, "error: config: bad"),
                             ("transport", ENVIRONMENT, "error: transport: down")):
        res = runner.invoke(_app(), ["boom", kind])
        assert res.exit_code == code
        assert res.stderr.strip() == text
        assert res.stdout == ""
    res = runner.invoke(_app(), ["boom", "none"])
    assert res.exit_code == USAGE
    assert json.loads(res.stdout) == {"error": "invalid_field", "field": "y", "detail": "--y: wrong",
                                      "exit": USAGE}
    assert res.stderr.strip() == "error: --y: wrong"
