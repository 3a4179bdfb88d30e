"""`envelopay garden …`: the walled garden — serve (LMTP on loopback into per-address
Maildirs), account (who may send as whom), deliver (one message in, as a client would)
and compact (retention of processed mail).

Exit codes by cli/output.EXIT_CODES; `garden serve --json` prints one document once it listens."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envelopay.cli.options import (
    MAX_PORT,
    RETENTION,
    JsonOpt,
    Retention,
)
from envelopay.cli.output import (
    ENVIRONMENT,
    FAILED,
    answers,
    emit,
    fail,
    finish,
    ran,
)
from envelopay.errors import ConfigError

if TYPE_CHECKING:
    pass


_Root = Annotated[Path, typer.Option("--root", help="Directory holding one Maildir per address.")]


garden_app = typer.Typer(
    help="The walled garden: LMTP on loopback into per-address Maildirs.", no_args_is_help=True
)


@garden_app.command("compact")
@RETENTION
def compact(keep: Retention, root: _Root) -> None:
    """Retention: delete processed mail (cur/) older than the window; new/ is never touched,
    and a symlink in a Maildir is skipped and named, never followed."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.mail.retention import prune_processed

    if not root.is_dir():
        fail(f"--root: no such directory: {root}")
    report = prune_processed(root, older_than=keep.seconds, now=time.time())
    finish(keep.as_json, ran("garden compact") | report.to_json(),
           [f"removed {report.removed} processed messages from {report.addresses} addresses",
            *(f"skipped {s['path']}: {s['reason']}" for s in report.skipped)])


@garden_app.command("serve")
def serve(
    root: _Root,
    address: Annotated[
        list[str], typer.Option("--address", "-a", help="A garden address (repeat for each).")
    ],
    host: Annotated[str, typer.Option(help="Loopback address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=MAX_PORT, help="TCP port (0 picks a free one).")] = 2424,
    socket: Annotated[
        Path | None, typer.Option("--socket", help="Listen on this Unix socket instead of TCP.")
    ] = None,
    fsync: Annotated[bool, typer.Option("--fsync/--no-fsync", help="fsync each delivery.")] = True,
    accounts: Annotated[
        Path | None,
        typer.Option("--accounts", help="Accounts file: every sender must AUTH (garden account)."),
    ] = None,
    open_garden: Annotated[
        bool,
        typer.Option("--open", help="Legacy: no AUTH, any local process may send From any address."),
    ] = False,
    login_timeout: Annotated[
        float, typer.Option(help="Seconds from connect to log in (AUTH); no command extends it.")
    ] = 10.0,
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds a logged-in connection may go without AUTH/MAIL/RCPT/DATA.")
    ] = 60.0,
    max_connections: Annotated[int, typer.Option(help="Logged-in connections at once.")] = 64,
    max_unauthenticated: Annotated[
        int, typer.Option(help="Connections not logged in at once; one more closes the oldest.")
    ] = 64,
    as_json: JsonOpt = False,
) -> None:
    """Run the garden's LMTP server until interrupted (SIGINT / SIGTERM). Every sender
    authenticates (--accounts) unless --open says otherwise."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.mail.garden import GardenServer
    from envelopay.mail.garden_auth import AccountsFile

    if (accounts is None) == (not open_garden):
        fail("--accounts FILE (every sender authenticates) or --open (legacy: none does): one of them")
    known = AccountsFile(accounts) if accounts is not None else None  # re-read when it changes
    with answers():  # an unreadable accounts file: the environment (3)
        initial = known.accounts() if known is not None else None
    with answers(input_kinds=(ConfigError,)):  # its flags are its configuration: bad input (2)
        server = GardenServer(root, address, host=host, port=port, unix_path=socket, fsync=fsync,
                              accounts=initial, open_garden=open_garden, refresh=known,
                              login_timeout=login_timeout, idle_timeout=idle_timeout,
                              max_connections=max_connections, max_unauthenticated=max_unauthenticated)
    if known is not None:
        known.garden = server
    if open_garden:
        typer.echo("WARNING: --open: this garden is OPEN, any local process may send From any of "
                   "its addresses", err=True)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with server:
            ep = server.endpoint
            where = f"unix:{ep}" if isinstance(ep, Path) else f"{ep[0]}:{ep[1]}"
            boxes = {addr: str(server.maildir(addr)) for addr in sorted(server.addresses)}
            if as_json:  # the one document: it listens, where, for whom (the log: stderr)
                emit(ran("garden serve", listening=where, maildirs=boxes))
            typer.echo(f"garden listening on {where} for {len(boxes)} address(es)", err=as_json)
            for addr, box in boxes.items():
                typer.echo(f"  {addr} -> {box}", err=as_json)
            await stop.wait()
        typer.echo(f"garden stopped: {server.stats.delivered} delivered", err=as_json)

    try:
        asyncio.run(run())
    except OSError as exc:
        fail(f"cannot listen: {exc.strerror or exc}", ENVIRONMENT)


@garden_app.command("account")
def account_cmd(
    accounts: Annotated[Path, typer.Option("--accounts", help="The accounts file (created if absent).")],
    user: Annotated[
        str | None, typer.Argument(help="The login (an agent's address, or e.g. 'enforcer').")
    ] = None,
    address: Annotated[
        list[str] | None,
        typer.Option("--address", "-a", help="An address it may send as (repeat for each).")
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Admit this agent: its address, its responders' and the "
                     "hash of its keys/garden.secret (nothing secret is printed)."),
    ] = None,
    take: Annotated[
        list[str] | None,
        typer.Option("--take", help="Move this address from the account holding it (repeat for each; "
                     "without it an address another account holds is refused, exit 2)."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Add (or replace) a garden account and print what it may send as. An address
    belongs to one account: one another account holds is refused unless --take names
    it. USER -a ADDR: a new secret, printed once on stdout (only its hash is kept; what
    was granted goes to stderr). -c CONFIG: an agent `init` set up, by its own secret."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.mail.garden_auth import grant, new_account
    from envelopay.node.init import admit_agent

    if (config is None) == (user is None):
        fail("give USER -a ADDRESS (a new secret) or --config CONFIG (an agent's own secret)")
    if config is not None:
        with answers():
            done = admit_agent(accounts, config, take=take or ())
        finish(as_json, ran("garden account", accounts=str(accounts), **done.to_json()), done.lines())
    assert user is not None

    with answers(input_kinds=(ConfigError,)):  # USER and -a are its flags: bad input (2)
        account, secret = new_account(user, address or [])
    with answers():  # an address taken: 2; an unreadable accounts file: the environment (3)
        done = grant(accounts, account, take=take or ())
    if not as_json:  # stdout is the secret alone (`$(envelopay garden account ...)`)
        for line in done.lines():
            typer.echo(line, err=True)
    finish(as_json, ran("garden account", accounts=str(accounts), secret=secret, **done.to_json()),
           [secret])


@garden_app.command("deliver")
def deliver_cmd(
    file: Annotated[str, typer.Argument(help="A raw message file, or - for stdin.")],
    to: Annotated[list[str], typer.Option("--to", help="Envelope recipient (repeat for each).")],
    sender: Annotated[str, typer.Option("--from", help="Envelope sender ('' for none).")] = "",
    endpoint: Annotated[
        str, typer.Option(help="host:port or a Unix socket path of the garden.")
    ] = "127.0.0.1:2424",
    user: Annotated[
        str | None,
        typer.Option("--user", help="Garden account to AUTH as; secret in $ENVELOPAY_GARDEN_SECRET."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Deliver one message into the garden over LMTP; print one line per recipient."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.mail.garden import deliver
    from envelopay.mail.transport.lmtp_client import parse_endpoint

    try:
        raw = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as exc:
        fail(f"FILE: cannot read {file}: {exc.strerror or exc}")
    with answers():  # a number that is no port: bad input, 2
        target = parse_endpoint(endpoint)

    secret = os.environ.get("ENVELOPAY_GARDEN_SECRET", "")
    if user is not None and not secret:
        fail("--user needs $ENVELOPAY_GARDEN_SECRET")
    auth = (user, secret) if user is not None else None
    with answers():  # the garden unreachable: the environment, 3
        done = asyncio.run(deliver(raw, sender, to, target, auth=auth))
    replies = {rcpt: {"code": r.code, "text": r.text} for rcpt, r in done.replies.items()}
    finish(as_json, ran("garden deliver", FAILED if done.refused else 0, replies=replies,
                           delivered=list(done.delivered), refused=list(done.refused)),
           [f"{rcpt}: {r['code']} {r['text']}" for rcpt, r in replies.items()])


def register(app: typer.Typer) -> None:
    """`envelopay garden ...`: the walled-garden LMTP transport."""
    app.add_typer(garden_app, name="garden")
