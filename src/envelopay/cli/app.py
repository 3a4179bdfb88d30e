"""The `envelopay` command: a thin front end; each area registers its own commands.

Command modules import heavy libraries (chains, mail) inside the command bodies so
that `envelopay --help` and `envelopay parse` start fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperGroup

from envelopay import __version__
from envelopay.cli import (
    agent_cmds,
    approvals_cmds,
    client_cmds,
    devnet_cmds,
    enforcer_cmds,
    evidence_cmds,
    garden_cmds,
    jobs_cmds,
    ledger_cmds,
    mail_cmds,
    node_cmds,
    protocol_cmds,
    rails_cmds,
    refunds_cmds,
    status_cmds,
)
from envelopay.cli.options import JsonOpt
from envelopay.cli.output import (
    emit,
    emit_or_say,
    error_document,
    json_mode,
    plain_words,
    ran,
    set_json_mode,
)

# Typer vendors click and exports no base class of its command-line refusals.
_ClickException: type[Exception] = typer.core._click.exceptions.ClickException  # type: ignore[attr-defined]


class _Root(TyperGroup):
    """The root command: resets the JSON mode per run, and answers a refusal of the
    command line itself (an unknown option, a value of the wrong type, a missing
    argument) with the JSON error document when --json was asked for."""

    def main(self, args: Sequence[str] | None = None, *rest: Any, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        set_json_mode(False)
        _flags_take_no_metavar(self)
        self._argv = argv
        try:
            return super().main(argv, *rest, **extra)
        finally:
            set_json_mode(False)  # nothing after this run (a test's next command) inherits it

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except _ClickException as exc:
            self._refused(exc)
            raise

    def make_context(self, *args: Any, **extra: Any) -> Any:
        try:
            return super().make_context(*args, **extra)
        except _ClickException as exc:
            self._refused(exc)
            raise

    def _refused(self, exc: Any) -> None:
        words = plain_words(exc)
        if words is not None:
            exc.message = words  # the plain run's message too
        if json_mode() or "--json" in getattr(self, "_argv", ()):
            field = _field(getattr(exc, "param", None))
            emit(error_document(exc.format_message(), exc.exit_code, field=field))


def _flags_take_no_metavar(cmd: Any) -> None:
    """Typer's help shows a plain flag (`--json`, `--force`, `--help`) as `<bool>`, which
    reads as if it wanted a value; an empty metavar shows nothing there. Every command's
    help option is made here (it is cached on the command) so it gets one too."""
    help_option = cmd.get_help_option(typer.core._click.Context(cmd))  # type: ignore[attr-defined]
    for param in [*cmd.params, *([help_option] if help_option is not None else [])]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(cmd, "commands", {}).values():
        _flags_take_no_metavar(sub)


def _field(param: Any) -> str | None:
    """How the command line names a parameter: its long option, else its short one, or
    the argument's name in capitals (ADDRESS)."""
    if param is None:
        return None
    if getattr(param, "param_type_name", "") == "argument":
        return str(param.name).upper()
    opts = list(getattr(param, "opts", ()))
    return next((o for o in opts if o.startswith("--")), opts[0] if opts else None)


app = typer.Typer(
    name="envelopay",
    cls=_Root,
    help="Envelopay: agents pay each other and trade work over email.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

@app.callback()
def _root() -> None:
    """Envelopay: agents pay each other and trade work over email."""


@app.command("version")
def version(as_json: JsonOpt = False) -> None:
    """Print the envelopay version."""
    emit_or_say(as_json, ran("version", version=__version__), __version__)


# Each command module mounts its commands; this order is the order `--help` lists them.
for _module in (protocol_cmds, rails_cmds, mail_cmds, garden_cmds, node_cmds, client_cmds, enforcer_cmds,
                agent_cmds, approvals_cmds, ledger_cmds, jobs_cmds, refunds_cmds, devnet_cmds, evidence_cmds,
                status_cmds):
    _module.register(app)


def main() -> None:
    app()
