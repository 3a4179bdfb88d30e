"""CLI commands of the mail area: `envelopay mail ...` (H6) and `envelopay garden ...` (H5)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    _register_mail(app)
    _register_garden(app)


def _register_mail(app: typer.Typer) -> None:
    """`envelopay mail ...`: the agent mailbox commands (owned by the mailbox work)."""
    _ = app


def _register_garden(app: typer.Typer) -> None:
    """`envelopay garden ...`: the walled-garden LMTP transport."""
    garden = typer.Typer(
        help="The walled garden: LMTP on loopback into per-address Maildirs.", no_args_is_help=True
    )
    app.add_typer(garden, name="garden")

    def fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    @garden.command("serve")
    def serve(
        root: Annotated[Path, typer.Option("--root", help="Directory holding one Maildir per address.")],
        address: Annotated[
            list[str], typer.Option("--address", "-a", help="A garden address (repeat for each).")
        ],
        host: Annotated[str, typer.Option(help="Loopback address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port (0 picks a free one).")] = 2424,
        socket: Annotated[
            Path | None, typer.Option("--socket", help="Listen on this Unix socket instead of TCP.")
        ] = None,
        fsync: Annotated[bool, typer.Option("--fsync/--no-fsync", help="fsync each delivery.")] = True,
    ) -> None:
        """Run the garden's LMTP server until interrupted (SIGINT / SIGTERM)."""
        import asyncio
        import signal

        from envelopay.errors import ConfigError, UsageError
        from envelopay.mail.garden import GardenServer

        try:
            server = GardenServer(root, address, host=host, port=port, unix_path=socket, fsync=fsync)
        except (ConfigError, UsageError) as exc:
            raise fail(str(exc)) from exc

        async def run() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            async with server:
                ep = server.endpoint
                where = f"unix:{ep}" if isinstance(ep, Path) else f"{ep[0]}:{ep[1]}"
                typer.echo(f"garden listening on {where} for {len(server.addresses)} address(es)")
                for addr in sorted(server.addresses):
                    typer.echo(f"  {addr} -> {server.maildir(addr)}")
                await stop.wait()
            typer.echo(f"garden stopped: {server.stats.delivered} delivered")

        try:
            asyncio.run(run())
        except OSError as exc:
            raise fail(f"cannot listen: {exc.strerror or exc}") from exc

    @garden.command("deliver")
    def deliver_cmd(
        file: Annotated[str, typer.Argument(help="A raw message file, or - for stdin.")],
        to: Annotated[list[str], typer.Option("--to", help="Envelope recipient (repeat for each).")],
        sender: Annotated[str, typer.Option("--from", help="Envelope sender ('' for none).")] = "",
        endpoint: Annotated[
            str, typer.Option(help="host:port or a Unix socket path of the garden.")
        ] = "127.0.0.1:2424",
    ) -> None:
        """Deliver one message into the garden over LMTP; print one line per recipient."""
        import asyncio
        import sys

        from envelopay.errors import TransportError, UsageError
        from envelopay.mail.garden import Endpoint, deliver

        try:
            raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
        except OSError as exc:
            raise fail(f"cannot read {file}: {exc.strerror or exc}") from exc
        host, sep, port = endpoint.rpartition(":")
        is_tcp = bool(sep) and port.isdigit() and "/" not in endpoint
        target: Endpoint = (host, int(port)) if is_tcp else Path(endpoint)
        try:
            result = asyncio.run(deliver(raw, sender, to, target))
        except UsageError as exc:
            raise fail(str(exc)) from exc
        except TransportError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from exc
        for rcpt, reply in result.replies.items():
            typer.echo(f"{rcpt}: {reply.code} {reply.text}")
        if result.refused:
            raise typer.Exit(1)
