"""CLI commands of the agent area: init, worker serve, the client messages, flows, show,
demo. Thin: each command parses options, calls envelopay.client (or node), prints the result.
Bad input → a message naming the field and exit code 2, before anything is sent."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from envelopay.cli.options import AfterOpt, LimitOpt
from envelopay.cli.output import FAILED, OK, answers, emit, next_page, table

if TYPE_CHECKING:
    from envelopay.client.commands import Act
    from envelopay.config import WorkerConfig

_InitAddress = Annotated[str, typer.Option("--address", help="This agent's address.")]
_InitDir = Annotated[Path, typer.Option("--dir", help="Where to write envelopay.toml and keys/.")]
_Force = Annotated[bool, typer.Option("--force", help="Rewrite an existing config (never keys).")]


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    _register_demo(app)
    _register_worker(app)
    _register_client(app)
    _register_call(app)

    @app.command("init")
    def init(
        address: _InitAddress = "agent@garden.local",
        directory: _InitDir = Path("."),
        force: _Force = False,
    ) -> None:
        """Write a configuration with local defaults and generate DKIM and wallet keys."""
        from envelopay.node.init import init_agent

        with answers():
            res = init_agent(directory, address=address, force=force)
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

        from envelopay.client.demo import Row, run_demo

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
            f"the worker's wallets hold {facts.get('worker_usdc_solana')} USDC units on solana-local "
            f"(attack payments that reached it included) and {facts.get('worker_usdc_base')} on base-local."
        )
        if not result.ok:
            for r in result.failures:
                console.print(f"[red]deviation:[/red] {r.step}: {r.message}: "
                              f"got {r.got}; expected {r.expected}")
            raise typer.Exit(1)


# -- worker serve ---------------------------------------------------------------------------

_Config = Annotated[Path, typer.Option("--config", "-c", help="Agent configuration (TOML).")]
_Garden = Annotated[bool, typer.Option("--garden", help="Also run the walled garden (LMTP) in this process.")]


def _load(config: Path) -> WorkerConfig:
    from envelopay.config import load_config

    return load_config(config)


def _register_worker(app: typer.Typer) -> None:
    worker = typer.Typer(help="Run a paid worker mailbox.", no_args_is_help=True)
    app.add_typer(worker, name="worker")

    @worker.command("serve")
    def serve(config: _Config = Path("worker.toml"), garden: _Garden = False) -> None:
        """Answer WHICH, ORDER, PAY and OFFER at the configured address until interrupted."""
        import asyncio

        from envelopay.node.serve import serve_worker

        with answers():
            cfg = _load(config)
            try:
                asyncio.run(serve_worker(cfg, embedded_garden=garden, echo=typer.echo))
            except KeyboardInterrupt:
                typer.echo("stopped")


# -- client messages --------------------------------------------------------------------------

_Flow = Annotated[str | None, typer.Option("--flow", help="The flow this message belongs to.")]
_Wait = Annotated[bool, typer.Option("--wait", help="Follow the flow until the answer arrives.")]
_Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.")]
_Note = Annotated[str | None, typer.Option("--note", help="Human-readable note.")]
_Id = Annotated[str | None, typer.Option("--id", help="Protocol id (default: generated).")]
_Amount = Annotated[str, typer.Option("--amount", help="Smallest units (digits).")]
_Token = Annotated[str, typer.Option("--token", help="Symbol or contract address.")]
_Chain = Annotated[str, typer.Option("--chain", help="e.g. solana-local, base-local.")]


def _client(config: Path, wait: bool, timeout: float, act: Act) -> NoReturn:
    """Run one client action (validate → pay → send), follow it with --wait, say what happened."""
    from envelopay.client.commands import ClientRun, run
    from envelopay.protocol.compose import message_json

    def say_sent(done: ClientRun) -> None:
        s = done.sent
        typer.echo(f"sent {done.kind} {s.message_id} (flow {s.flow_id}, state {s.state})")

    res = run(_load(config), act, wait=wait, timeout=timeout, on_sent=say_sent, progress=typer.echo)
    if res.queued is not None:
        typer.echo(f"queued {res.kind} {res.sent.message_id} (flow {res.sent.flow_id}): not delivered yet: "
                   f"{res.queued}", err=True)
        raise typer.Exit(FAILED)
    answer = res.answer
    if answer is None:
        raise typer.Exit(OK)
    if answer.timed_out:
        typer.echo(f"no answer within {timeout:g} s; see: envelopay show {res.sent.flow_id}")
        raise typer.Exit(FAILED)
    out = answer.outcome
    assert out is not None
    kind = answer.message.type.upper() if answer.message is not None else "?"
    typer.echo(f"received {kind} (flow {out.flow_id}, state {out.state})")
    if answer.message is not None:
        typer.echo(message_json(answer.message, indent=2))
    raise typer.Exit(OK)


def _ask_with_task(kind: str, prefix: str, address: str, task: str | None, note: str | None, id: str | None,
                   flow: str | None, config: Path, wait: bool, timeout: float) -> None:
    """WHICH or ORDER: a message carrying a task (JSON)."""
    from envelopay.client import commands as c

    with answers():
        to = c.check_address(address)
        msg = c.draft(kind, id=c.new_id(prefix, id), task=c.parse_json_option(task, "--task"), note=note)
        _client(config, wait, timeout, c.send(msg, to, flow))


def _register_client(app: typer.Typer) -> None:
    # Imports stay inside the commands: `envelopay --help` must not load the engine.
    @app.command("which")
    def which(address: str, config: _Config = Path("envelopay.toml"),
              task: Annotated[str | None, typer.Option("--task", help="Task (JSON) to price.")] = None,
              note: _Note = None, id: _Id = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Ask ADDRESS what it accepts (WHICH → METHODS)."""
        _ask_with_task("which", "wch", address, task, note, id, None, config, wait, timeout)

    @app.command("order")
    def order(address: str, task: Annotated[str, typer.Option("--task", help="Task (JSON): name + fields.")],
              config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
              flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Order work from ADDRESS (ORDER → INVOICE or FULFILL)."""
        _ask_with_task("order", "ord", address, task, note, id, flow, config, wait, timeout)

    @app.command("pay")
    def pay(address: str,
            amount: _Amount, token: _Token, chain: _Chain,
            to_wallet: Annotated[str | None, typer.Option("--wallet", help="Recipient wallet "
                                                          "(default: the invoice's).")] = None,
            invoice: Annotated[str | None, typer.Option("--invoice", help="INVOICE id this pays.")] = None,
            config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
            flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Pay on the rail, then send PAY with the proof (PAY → FULFILL when it settles an INVOICE)."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            # Validate every field with a placeholder proof before any money moves.
            draft = c.draft("pay", id=c.new_id("pay", id), amount=amount, token=token, chain=chain,
                            proof={"tx": "-"}, invoice_ref=invoice, note=note)
            _client(config, wait, timeout, c.pay(draft, to, wallet=to_wallet, invoice=invoice, flow=flow))

    @app.command("invoice")
    def invoice_cmd(address: str,
                    amount: _Amount, token: _Token, chain: _Chain,
                    wallet: Annotated[str | None, typer.Option("--wallet")] = None,
                    order_ref: Annotated[str | None, typer.Option("--order", help="ORDER id.")] = None,
                    due: Annotated[str | None, typer.Option("--due")] = None,
                    config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
                    flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Bill ADDRESS (INVOICE → PAY)."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            w = c.billing_wallet(_load(config), chain, token, wallet)
            msg = c.draft("invoice", id=c.new_id("inv", id), amount=amount, token=token, chain=chain,
                          wallet=w, order_ref=order_ref, due=due, note=note)
            _client(config, wait, timeout, c.send(msg, to, flow))

    @app.command("offer")
    def offer(address: str,
              give_amount: Annotated[str, typer.Option("--give-amount")],
              give_token: Annotated[str, typer.Option("--give-token")],
              give_chain: Annotated[str, typer.Option("--give-chain")],
              give_to: Annotated[str, typer.Option("--give-to", help="Their wallet for the give leg.")],
              want_amount: Annotated[str, typer.Option("--want-amount")],
              want_token: Annotated[str, typer.Option("--want-token")],
              want_chain: Annotated[str, typer.Option("--want-chain")],
              wallet: Annotated[str | None, typer.Option("--wallet", help="Ours, for the return.")] = None,
              config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
              wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Pay the give leg, then OFFER it for the wanted asset (OFFER → ACCEPT)."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            w = c.return_wallet(_load(config), want_chain, wallet)
            draft = c.draft("offer", id=c.new_id("ofr", id), wallet=w, note=note,
                            give={"amount": give_amount, "token": give_token, "chain": give_chain,
                                  "to": give_to, "proof": {"tx": "-"}},
                            want={"amount": want_amount, "token": want_token, "chain": want_chain})
            _client(config, wait, timeout, c.offer(draft, to))

    @app.command("accept")
    def accept(address: str, offer_ref: Annotated[str, typer.Option("--offer", help="OFFER id.")],
               amount: _Amount, token: _Token, chain: _Chain,
               to_wallet: Annotated[str | None, typer.Option("--wallet", help="Default: OFFER's.")] = None,
               config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
               flow: _Flow = None) -> None:
        """Pay the counter-asset, then ACCEPT the OFFER with its proof."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            draft = c.draft("accept", id=c.new_id("acc", id), offer_ref=offer_ref, amount=amount,
                            token=token, chain=chain, proof={"tx": "-"}, note=note)
            _client(config, False, 0.0, c.accept(draft, to, wallet=to_wallet, offer_ref=offer_ref, flow=flow))

    @app.command("fulfill")
    def fulfill(address: str, order_ref: Annotated[str, typer.Option("--order", help="ORDER id.")],
                result: Annotated[str, typer.Option("--result", help="Work product (JSON).")],
                config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
                flow: _Flow = None) -> None:
        """Deliver work for an ORDER (FULFILL)."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            msg = c.draft("fulfill", id=c.new_id("ful", id), order_ref=order_ref,
                          result=c.parse_json_option(result, "--result"), note=note)
            _client(config, False, 0.0, c.send(msg, to, flow))

    @app.command("oops")
    def oops(address: str, code: Annotated[str, typer.Option("--code", help="e.g. tx_not_found.")],
             note: Annotated[str, typer.Option("--note", help="What went wrong, for a human.")],
             ref: Annotated[str | None, typer.Option("--ref", help="Id of the message concerned.")] = None,
             config: _Config = Path("envelopay.toml"), id: _Id = None, flow: _Flow = None) -> None:
        """Tell ADDRESS something went wrong (OOPS)."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            msg = c.draft("oops", id=c.new_id("oops", id), note=note, ref=ref, error={"code": code})
            _client(config, False, 0.0, c.send(msg, to, flow))

    @app.command("flows")
    def flows_cmd(
        config: _Config = Path("envelopay.toml"), limit: LimitOpt = 50, after: AfterOpt = None
    ) -> None:
        """A table of this agent's flows and their states, newest first, one page."""
        from envelopay.client import commands as c

        with answers():
            cfg = _load(config)
            rows, nxt = c.flows(cfg, limit, after)
        table(("flow", "peer", "kind", "side", "state", "updated"),
              [(f.flow_id, f.peer, f.kind, f.side, f.state, f.updated_at.isoformat(timespec="seconds"))
               for f in rows], title=f"flows of {cfg.agent.address}")
        next_page(nxt, f"envelopay flows --config {config}")

    @app.command("show")
    def show(flow: str, config: _Config = Path("envelopay.toml")) -> None:
        """The thread of one flow, with each proof's verdict."""
        from envelopay.client import commands as c

        with answers():
            rec, log = c.flow_thread(_load(config), flow)
        table(("at", "dir", "type", "id", "proof verdict", "oops", "Message-ID"),
              [(e.at.isoformat(timespec="seconds"), e.direction, e.type.upper(), e.protocol_id or "",
                _verdict(e.verdict), e.oops or "", e.message_id or "") for e in log],
              title=f"{rec.flow_id}: {rec.kind} with {rec.peer}, {rec.side}, state {rec.state}",
              overflow=True)


def _verdict(verdict: Mapping[str, Any] | None) -> str:
    if not verdict:
        return ""
    text = str(verdict.get("status"))
    if verdict.get("reason"):
        text += f" ({verdict['reason']})"
    return text


_Request = Annotated[str, typer.Option("--request", help="The request: one JSON object.")]


def _register_call(app: typer.Typer) -> None:
    @app.command("call")
    def call(address: str, request: _Request, config: _Config = Path("envelopay.toml"),
             timeout: _Timeout = 60.0) -> None:
        """Call an email-as-tool endpoint (e.g. kv@garden.local) and print its reply as JSON."""
        from envelopay.client import commands as c

        with answers():
            to = c.check_address(address)
            payload = c.call_request(request)
            cfg = _load(config)
        with answers(transport=FAILED, transport_prefix="transport: "):
            result = c.call_endpoint(cfg, to, payload, timeout)
        out: dict[str, Any] = {"call_id": result.call_id, "status": result.status}
        out.update({"result": result.result} if result.ok else {"error": result.error})
        emit(out, indent=2)
        raise typer.Exit(OK if result.ok else FAILED)
