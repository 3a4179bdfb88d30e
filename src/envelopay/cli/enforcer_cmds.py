"""CLI of the send enforcer: `enforcer serve`, `agent create|list|kill`,
`approvals list|show|approve|reject|retry`, and `mcp` (the agents' MCP front).

Operator commands talk to the running service with the operator credential (never to
the database directly). Exit codes by cli/output.EXIT_CODES; `approvals approve|retry`
exit by what became of the send (cli/operator.decision_exit). `enforcer serve --json`
prints one document when it listens (README "Output and exit codes").
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from envelopay.cli.maintained import ENFORCER_TABLE, missing_store
from envelopay.cli.options import (
    DEFAULT_TOKEN_FILE,
    MAX_PORT,
    RETENTION,
    JsonOpt,
    Retention,
    TokenFileOpt,
)
from envelopay.cli.output import ENVIRONMENT, answers, emit, fail, finish, ran
from envelopay.errors import ConfigError

T = TypeVar("T")

_SEC = "starttls | tls | none"
_USER = "SMTP user; the password comes from $ENVELOPAY_SMTP_PASSWORD"
_GARDEN = "Deliver into the walled garden: its LMTP socket path or port."


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    with answers():
        return asyncio.run(main())
    raise AssertionError("unreachable")  # for mypy: `answers` ends the command on any error


def _store(db: str) -> Any:
    """The store --db names, not yet opened. Every command taking --db reads it the same
    way: a URL of no store we know, or a SQLite path that cannot be one (a directory, a
    file that is not a SQLite database, under no directory), is bad input (2, naming
    --db: serve said 3 where compact said 2); a server that does not answer is the
    environment (3, EXIT_CODES)."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.send.backends import SqliteStore, open_store

    try:
        store = open_store(db)
    except ConfigError as exc:
        fail(f"--db: {exc}")
    if isinstance(store, SqliteStore):
        problem = _sqlite_path_problem(Path(store.path))
        if problem is not None:
            fail(f"--db: {problem}")
    return store


_SQLITE_HEADER = b"SQLite format 3\x00"


def _sqlite_path_problem(path: Path) -> str | None:
    if path.exists() and not path.is_file():
        return f"{path} is not a file"
    if not path.parent.is_dir():
        return f"no such directory: {path.parent}"
    if path.is_file() and path.stat().st_size:
        with path.open("rb") as f:
            if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return f"{path} is not a SQLite database"
    return None


enforcer_app = typer.Typer(help="The send enforcer service.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `enforcer` and `mcp` to the top-level app (`agent` and `approvals` are in
    agent_cmds and approvals_cmds)."""
    app.add_typer(enforcer_app, name="enforcer")
    app.command("mcp")(mcp)


@enforcer_app.command("serve")
def serve(
    db: Annotated[str, typer.Option("--db", help="sqlite:///PATH, a file path, or postgresql://...")],
    port: Annotated[int, typer.Option("--port", min=0, max=MAX_PORT, help="Loopback TCP port.")] = 8725,
    host: Annotated[str, typer.Option("--host", help="Loopback address to bind.")] = "127.0.0.1",
    socket: Annotated[Path | None, typer.Option("--socket", help="Listen on this Unix socket.")] = None,
    console_port: Annotated[int | None, typer.Option(
        "--console-port", min=1, max=65535,
        help="With --socket: also serve on loopback at this port, for a browser's /console.")] = None,
    token_file: TokenFileOpt = Path(DEFAULT_TOKEN_FILE),
    smtp_host: Annotated[str | None, typer.Option("--smtp-host")] = None,
    smtp_port: Annotated[int, typer.Option("--smtp-port", min=1, max=MAX_PORT)] = 587,
    smtp_security: Annotated[str, typer.Option("--smtp-security", help=_SEC)] = "starttls",
    smtp_user: Annotated[str | None, typer.Option("--smtp-user", help=_USER)] = None,
    garden: Annotated[str | None, typer.Option("--garden", help=_GARDEN)] = None,
    dkim_key: Annotated[Path | None, typer.Option("--dkim-key", help="PEM private key.")] = None,
    dkim_selector: Annotated[str, typer.Option("--dkim-selector")] = "envelopay",
    dkim_domain: Annotated[str | None, typer.Option("--dkim-domain")] = None,
    vault_key_file: Annotated[Path | None, typer.Option(
        "--vault-key-file", help="Seals the agents' wallet keys (or $ENVELOPAY_ENFORCER_VAULT_SECRET).")]
    = None,
    pay_rail: Annotated[list[str] | None, typer.Option(
        "--pay-rail", help="CHAIN[=RPC_URL]: pay on this chain from the agents' wallets.")] = None,
    inbox_root: Annotated[Path | None, typer.Option(
        "--inbox-root", help="ROOT/<address>/ Maildirs (the garden's), read for pay_invoice.")] = None,
    dkim_dns: Annotated[str, typer.Option(
        "--dkim-dns", help="Where INVOICE DKIM keys are looked up: resolver (DNS), or devnet "
        "(the devnet's key table, as init --devnet's agents).")] = "resolver",
    as_json: JsonOpt = False,
) -> None:
    """Run the enforcer: the only holder of the SMTP credential, the DKIM key and the
    agents' wallet keys."""
    # lazy: keeps cryptography, httpx off this module's import
    from envelopay.enforcer.service.launch import prepare, serve
    from envelopay.enforcer.service.spend_launch import prepare_spend
    from envelopay.node.agent_node import dns_setup

    _store(db)  # not opened: a URL of no store we know is refused first, as by compact
    # Its configuration is its flags: a ConfigError here names one (bad input, exit 2).
    with answers(input_kinds=(ConfigError,)):
        launch = prepare(
            db=db, token_file=token_file, garden=garden, smtp_host=smtp_host, smtp_port=smtp_port,
            smtp_security=smtp_security, smtp_user=smtp_user, dkim_key=dkim_key,
            dkim_selector=dkim_selector, dkim_domain=dkim_domain,
            token_created=lambda p: typer.echo(f"operator token written to {p} (mode 600)", err=True),
        )
        if dkim_dns not in ("resolver", "devnet"):
            raise ConfigError(f"--dkim-dns {dkim_dns!r}: resolver or devnet")
        spend = prepare_spend(vault_key_file=vault_key_file, pay_rails=pay_rail or [],
                              inbox_root=inbox_root, dns=dns_setup(dkim_dns, {}))

    def listening(where: object) -> None:
        typer.echo(f"enforcer listening on {where}", err=True)
        if as_json:  # the one document: ready, and where (a long-running command)
            emit(ran("enforcer serve", listening=str(where), operator_token_file=str(token_file)))

    try:
        _run(lambda: serve(launch, host=host, port=port, socket=socket, spend=spend, listening=listening,
                           console_port=console_port, stopped=lambda line: typer.echo(line, err=True)))
    except OSError as exc:  # a port in use, a socket path we cannot bind
        fail(f"cannot listen: {exc.strerror or exc}", ENVIRONMENT)

@enforcer_app.command("compact")
@RETENTION
def compact(
    keep: Retention,
    db: Annotated[str, typer.Option("--db", help="The enforcer's store, as given to serve.")],
) -> None:
    """Retention: delete finished sends older than the window, their spent claims and
    past cap and spend counters; compact finished payments (kept: what answers a retry
    and refuses a second payment of an INVOICE). Runs beside a serving enforcer (short
    statements on the same store)."""
    # lazy: keeps cryptography, httpx off this module's import
    from envelopay.enforcer.service.retention import compact_enforcer

    store = _store(db)
    with answers(as_json=keep.as_json):  # a server that does not answer: 3
        gone = missing_store(db, ENFORCER_TABLE)
    if gone is not None:  # never made here: `removed 0` from a store just created said nothing true
        fail(f"--db: {gone}; nothing was created (enforcer serve makes the store)", as_json=keep.as_json)

    async def go() -> dict[str, Any]:
        await store.open()
        try:
            report = await compact_enforcer(store, older_than=keep.seconds, now=time.time())
        finally:
            await store.close()
        return report.to_json()

    doc = _run(go)
    finish(keep.as_json, ran("enforcer compact") | doc,
           [f"removed {doc['sends']} sends, {doc['outcomes']} outcomes, {doc['counters']} counters,"
            f" {doc['claims']} claims, {doc['spend_counters']} spend counters;"
            f" compacted {doc['payments']} payments"])


def mcp() -> None:
    """MCP server (stdio) for an agent: send protocol messages, check inbox and status.
    Configured by $ENVELOPAY_ENFORCER, $ENVELOPAY_AGENT_TOKEN, $ENVELOPAY_AGENT_ADDRESS and
    optionally $ENVELOPAY_AGENT_MAILDIR."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.client.mcp_server import config_from_env, run_stdio

    with answers():  # the environment configures it: a ConfigError is exit 3
        config = config_from_env(os.environ)
    run_stdio(config)
