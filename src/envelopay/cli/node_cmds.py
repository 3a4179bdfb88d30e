"""CLI commands that run a node of your own: init, worker serve, call, demo; the client
messages, flows, show, outbox and drain are in client_cmds (the leashed agents' `agent …`
commands are in agent_cmds). Thin: each command parses options,
calls envelopay.client (or node), prints the result.
Bad input → a message naming the field and exit code 2, before anything is sent."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.options import JsonOpt
from envelopay.cli.output import ENVIRONMENT, FAILED, OK, answers, emit, fail, ran
from envelopay.errors import UsageError
from envelopay.rails.amounts import amount_with_units

if TYPE_CHECKING:
    from envelopay.config import WorkerConfig

_InitAddress = Annotated[str, typer.Option("--address", help="This agent's address.")]
_InitDir = Annotated[Path, typer.Option("--dir", help="Where to write envelopay.toml and keys/.")]
_Force = Annotated[bool, typer.Option("--force", help="Rewrite an existing config (never keys).")]


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app (in the order help lists them)."""
    app.command("demo")(demo)
    app.add_typer(worker_app, name="worker")
    app.command("call")(call)
    app.command("init")(init)


def init(
    address: _InitAddress = "agent@garden.local",
    directory: _InitDir = Path("."),
    force: _Force = False,
    devnet: Annotated[bool, typer.Option("--devnet", help="Configure for the running devnet, register "
                                         "with it and fund the wallets.")] = False,
    fund: Annotated[bool, typer.Option(help="With --devnet: fund the new wallets.")] = True,
    as_json: JsonOpt = False,
) -> None:
    """Write a configuration with local defaults and generate DKIM and wallet keys."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.node.init import init_agent, init_devnet_agent

    funded: list[str] = []
    with answers(as_json=as_json):
        if devnet:
            res, funded = init_devnet_agent(directory, address=address, force=force, fund=fund)
        else:
            res = init_agent(directory, address=address, force=force)
    if as_json:
        emit({"command": "init", "ok": True, "exit": OK, "config": str(res.config),
              "wallets": {"solana-local": str(res.solana_wallet), "base-local": str(res.base_wallet)},
              "dkim_txt": str(res.dkim_txt), "garden_secret": str(res.garden_secret), "funded": funded,
              "responders": list(res.responders)})
        return
    typer.echo(f"wrote {res.config}")
    for line in funded:
        typer.echo(line)
    typer.echo(f"solana-local wallet  {res.solana_wallet}")
    typer.echo(f"base-local wallet    {res.base_wallet}")
    typer.echo(f"DKIM DNS record      {res.dkim_txt}")
    typer.echo(f"garden secret        {res.garden_secret}  (mode 0600; not shown)")
    for responder in res.responders:  # what `envelopay call` is pointed at
        typer.echo(f"responder            {responder}")


_Keep = Annotated[Path | None, typer.Option("--keep", help="Keep the demo's files in this directory.")]


def demo(keep: _Keep = None, as_json: JsonOpt = False) -> None:
    """Buyer and paid worker on embedded defaults (garden, SQLite, LiteSVM, eth-tester).

    First contact with USDC on Solana and on Base, one OFFER→ACCEPT, and five attacks
    that must fail (one of them an insider the garden refuses). Exit 0 only if every expectation held."""
    # lazy: keeps rich off this module's import
    from rich.console import Console
    from rich.table import Table

    from envelopay.client.demo import Row, run_demo  # lazy: keeps cryptography off this module's import

    # Wide enough for the table when the output is a file or a pipe; under --json
    # the table goes to stderr and stdout holds the one document.
    out = sys.stderr if as_json else sys.stdout
    console = Console(file=out, width=None if out.isatty() else 120)
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
        f"the worker's wallets hold {_usdc(facts, 'solana')} on solana-local "
        f"(the underpaid attack's money refunded; the forged PAY's, from no authenticated sender, kept) "
        f"and {_usdc(facts, 'base')} on base-local."
    )
    for r in result.failures:
        console.print(f"[red]deviation:[/red] {r.step}: {r.message}: got {r.got}; expected {r.expected}")
    code = OK if result.ok else FAILED
    if as_json:
        rows = [{"step": r.step, "who": r.direction, "message": r.message, "got": r.got,
                 "expected": r.expected, "ok": r.ok} for r in result.rows]
        emit(ran("demo", code, seconds=round(result.seconds, 3), rows=rows, facts=facts))
    raise typer.Exit(code)


# -- worker serve ---------------------------------------------------------------------------

_Config = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]
_Garden = Annotated[bool, typer.Option("--garden", help="Also run the walled garden (LMTP) in this process.")]


_LogFormat = Annotated[str, typer.Option("--log-format", metavar="text|json",
                                          help="The per-message log on stderr: text or json.")]
_Metrics = Annotated[str | None, typer.Option(
    "--metrics", metavar="[HOST:]PORT", help="Serve Prometheus metrics at http://HOST:PORT/metrics "
    "(HOST defaults to 127.0.0.1; PORT 0: any free port). Off by default.")]
_Console = Annotated[str | None, typer.Option(
    "--console", metavar="[HOST:]PORT", help="Serve the worker's console (flows, revenue, jobs, refunds, "
    "OOPS; read only) at http://HOST:PORT/console, said on stderr at start (HOST defaults to 127.0.0.1; "
    "PORT 0: any free port). Off by default.")]

_MailConcurrency = Annotated[int, typer.Option(
    "--mail-concurrency", metavar="N", min=1, max=256, help="Messages the mailbox serves at once (those of "
    "one thread in their arrival order, other threads beside them), so a WHICH or a new ORDER does not "
    "wait behind a burst of PAYs verifying on their chains. 1: one at a time.")]


def _load(config: Path) -> WorkerConfig:
    from envelopay.config import load_config  # lazy: the command's room loads when it runs, not at CLI start

    return load_config(config)


worker_app = typer.Typer(help="Run a paid worker mailbox.", no_args_is_help=True)


@worker_app.command("serve")
def worker_serve(
    config: _Config = Path("envelopay.toml"), garden: _Garden = False, log_format: _LogFormat = "text",
    metrics: _Metrics = None, console: _Console = None, as_json: JsonOpt = False,
    mail_concurrency: _MailConcurrency = 8,  # node.runtime.MAIL_CONCURRENCY (the CLI starts without node/)
) -> None:
    """Answer WHICH, ORDER, PAY and OFFER at the configured address until interrupted.
    Each message handled is one line on stderr, and a summary at stop.
    With --json: one document on stdout once it serves; the log goes to stderr."""
    # lazy: keeps aiohttp, cryptography, prometheus_client off this module's import
    from envelopay.node.console import console_endpoint
    from envelopay.node.metrics import metrics_endpoint
    from envelopay.node.serve import serve_worker

    scraped: list[str] = []
    pages: list[str] = []

    def console_ready(url: str) -> None:
        pages.append(url)
        typer.echo(f"console at {url}", err=True)

    def ready(garden_server: Any) -> None:
        if as_json:
            endpoint = getattr(garden_server, "endpoint", None)
            emit(ran("worker serve", address=cfg.agent.address, tasks=[t.name for t in cfg.tasks],
                        ledger=str(cfg.agent.ledger), transport=cfg.transport.kind,
                        garden=None if endpoint is None else str(endpoint),
                        metrics=scraped[0] if scraped else None, console=pages[0] if pages else None))

    with answers():
        if log_format not in ("text", "json"):
            raise UsageError(f"--log-format {log_format!r}: text or json")
        where = metrics_endpoint(metrics) if metrics is not None else None
        pages_at = console_endpoint(console) if console is not None else None
        cfg = _load(config)
        # SIGINT/SIGTERM end the serve loop gracefully (node.serve); a second Ctrl-C
        # during shutdown is the KeyboardInterrupt. Either way the terminal hears it.
        try:
            with contextlib.suppress(KeyboardInterrupt):
                asyncio.run(serve_worker(cfg, embedded_garden=garden, ready=ready,
                                         echo=lambda line: typer.echo(line, err=as_json),
                                         log=lambda line: typer.echo(line, err=True),
                                         log_format="json" if log_format == "json" else "text",
                                         metrics_at=where, metrics_ready=scraped.append,
                                         console_at=pages_at, console_ready=console_ready,
                                         mail_concurrency=mail_concurrency))
        except OSError as exc:  # the metrics or console port in use, an address we cannot bind
            option = "--console" if scraped or where is None else "--metrics"  # metrics start first
            fail(f"cannot listen for {option}: {exc.strerror or exc}", ENVIRONMENT)
        typer.echo(f"{cfg.agent.address} stopped", err=True)


_Request = Annotated[str, typer.Option("--request", help="The request: one JSON object.")]


_Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait for the reply.")]


def call(address: str, request: _Request, config: _Config = Path("envelopay.toml"),
         timeout: _Timeout = 60.0, as_json: JsonOpt = False) -> None:
    """Call an email-as-tool endpoint (e.g. kv-worker@garden.local, as `init` prints) and print
    its reply as JSON (always; --json is accepted for the uniform contract)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=True):
        to = c.check_address(address)
        payload = c.call_request(request)
        c.check_timeout(timeout)
        cfg = _load(config)
    with answers(transport_prefix="transport: ", as_json=True):  # transport down: exit 3
        result = c.call_endpoint(cfg, to, payload, timeout)
    code = OK if result.ok else FAILED
    out: dict[str, Any] = {"command": "call", "ok": result.ok, "exit": code, "call_id": result.call_id,
                           "status": result.status}
    out.update({"result": result.result} if result.ok else {"error": result.error})
    emit(out, indent=2)
    raise typer.Exit(code)


def _usdc(facts: dict[str, Any], chain: str) -> str:
    """The worker's USDC on `chain` as a person reads it, in the registry's decimals."""
    units = facts.get(f"worker_usdc_{chain}")
    decimals = (facts.get("usdc_decimals") or {}).get(f"{chain}-local")
    return amount_with_units(units, "USDC", decimals) if isinstance(units, int) else str(units)
