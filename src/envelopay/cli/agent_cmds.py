"""CLI commands of the agent area: init, worker serve, the client messages, flows, show,
demo. Thin: each command parses options, calls envelopay.agent, prints the result.
Bad input → a message naming the field and exit code 2, before anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from envelopay.errors import ConfigError, UsageError

_InitAddress = Annotated[str, typer.Option("--address", help="This agent's address.")]
_InitDir = Annotated[Path, typer.Option("--dir", help="Where to write envelopay.toml and keys/.")]
_Force = Annotated[bool, typer.Option("--force", help="Rewrite an existing config (never keys).")]


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""

    @app.command("init")
    def init(
        address: _InitAddress = "agent@garden.local",
        directory: _InitDir = Path("."),
        force: _Force = False,
    ) -> None:
        """Write a configuration with local defaults and generate DKIM and wallet keys."""
        from envelopay.agent.init import init_agent

        try:
            res = init_agent(directory, address=address, force=force)
        except (UsageError, ConfigError) as exc:
            _fail(str(exc))
        typer.echo(f"wrote {res.config}")
        typer.echo(f"solana-local wallet  {res.solana_wallet}")
        typer.echo(f"base-local wallet    {res.base_wallet}")
        typer.echo(f"DKIM DNS record      {res.dkim_txt}")

