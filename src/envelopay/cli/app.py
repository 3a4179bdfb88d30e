"""The `envelopay` command: a thin front end; each area registers its own commands.

Command modules import heavy libraries (chains, mail) inside the command bodies so
that `envelopay --help` and `envelopay parse` start fast.
"""

from __future__ import annotations

import typer

from envelopay.cli import (
    agent_cmds,
    client_cmds,
    devnet_cmds,
    enforcer_cmds,
    ledger_cmds,
    mail_cmds,
    protocol_cmds,
    rails_cmds,
)

app = typer.Typer(
    name="envelopay",
    help="Envelopay: agents pay each other and trade work over email.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

@app.callback()
def _root() -> None:
    """Envelopay: agents pay each other and trade work over email."""


@app.command("version")
def version() -> None:
    """Print the envelopay version."""
    from envelopay import __version__

    typer.echo(__version__)


for _module in (protocol_cmds, rails_cmds, mail_cmds, agent_cmds, client_cmds, enforcer_cmds, ledger_cmds,
                devnet_cmds):
    _module.register(app)


def main() -> None:
    app()
