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
    _register_demo(app)

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



_Keep = Annotated[Path | None, typer.Option("--keep", help="Keep the demo's files in this directory.")]


def _register_demo(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(keep: _Keep = None) -> None:
        """Buyer and paid worker on embedded defaults (garden, SQLite, LiteSVM, eth-tester).

        First contact with USDC on Solana and on Base, one OFFER→ACCEPT, and four attacks
        that must fail. Exit 0 only if every expectation held."""
        import asyncio
        import sys
        import tempfile

        from rich.console import Console
        from rich.table import Table

        from envelopay.agent.demo import Row, run_demo

        # Wide enough for the table when the output is a file or a pipe.
        console = Console(width=None if sys.stdout.isatty() else 120)
        console.print("[bold]envelopay demo[/bold] — buyer@garden.local and worker@garden.local, no network")

        def echo(row: Row) -> None:
            if not row.ok:
                console.print(f"[red]deviation[/red] {row.step}: {row.message}")

        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            result = asyncio.run(run_demo(keep, echo=echo))
        else:
            with tempfile.TemporaryDirectory(prefix="envelopay-demo-") as tmp:
                result = asyncio.run(run_demo(Path(tmp), echo=echo))

        table = Table(title="The conversation (every row is a checked expectation)")
        for col in ("step", "who", "message", "what happened", ""):
            table.add_column(col, overflow="fold")
        for r in result.rows:
            verdict = "[green]✓[/green]" if r.ok else f"[red]✗ expected {r.expected}[/red]"
            table.add_row(r.step, r.direction, r.message, r.got, verdict)
        console.print(table)
        passed = sum(r.ok for r in result.rows)
        facts = result.facts
        console.print(
            f"[bold]{passed}/{len(result.rows)} expectations held[/bold] in {result.seconds:.1f} s; "
            f"worker earned {facts.get('worker_usdc_solana')} USDC units on solana-local and holds "
            f"{facts.get('worker_usdc_base')} on base-local."
        )
        if not result.ok:
            for r in result.failures:
                console.print(f"[red]deviation:[/red] {r.step}: {r.message}: "
                              f"got {r.got}; expected {r.expected}")
            raise typer.Exit(1)
