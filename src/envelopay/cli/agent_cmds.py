"""CLI commands of the agent area: init, worker serve, the client messages, flows, show,
demo. Thin: each command parses options, calls envelopay.agent, prints the result.
Bad input → a message naming the field and exit code 2, before anything is sent."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from envelopay.errors import ConfigError, TransportError, UsageError

_InitAddress = Annotated[str, typer.Option("--address", help="This agent's address.")]
_InitDir = Annotated[Path, typer.Option("--dir", help="Where to write envelopay.toml and keys/.")]
_Force = Annotated[bool, typer.Option("--force", help="Rewrite an existing config (never keys).")]


def _fail(message: str, code: int = 2) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


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


def _load(config: Path) -> Any:
    from envelopay.config import load_config

    try:
        return load_config(config)
    except ConfigError as exc:
        _fail(str(exc))


def _register_worker(app: typer.Typer) -> None:
    worker = typer.Typer(help="Run a paid worker mailbox.", no_args_is_help=True)
    app.add_typer(worker, name="worker")

    @worker.command("serve")
    def serve(config: _Config = Path("worker.toml"), garden: _Garden = False) -> None:
        """Answer WHICH, ORDER, PAY and OFFER at the configured address until interrupted."""
        import asyncio

        from envelopay.node.serve import serve_worker

        cfg = _load(config)
        try:
            asyncio.run(serve_worker(cfg, embedded_garden=garden, echo=typer.echo))
        except KeyboardInterrupt:
            typer.echo("stopped")
        except (ConfigError, UsageError) as exc:
            _fail(str(exc))


# -- client messages --------------------------------------------------------------------------

_Flow = Annotated[str | None, typer.Option("--flow", help="The flow this message belongs to.")]
_Wait = Annotated[bool, typer.Option("--wait", help="Follow the flow until the answer arrives.")]
_Timeout = Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.")]
_Note = Annotated[str | None, typer.Option("--note", help="Human-readable note.")]
_Id = Annotated[str | None, typer.Option("--id", help="Protocol id (default: generated).")]
_Amount = Annotated[str, typer.Option("--amount", help="Smallest units (digits).")]
_Token = Annotated[str, typer.Option("--token", help="Symbol or contract address.")]
_Chain = Annotated[str, typer.Option("--chain", help="e.g. solana-local, base-local.")]


def _client(config: Path, wait: bool, timeout: float, act: Any) -> None:
    """Run one client action: build the node, act (validate → pay → send), follow."""
    import asyncio

    from envelopay.client.buyer import ClientApp, follow
    from envelopay.node.wiring import build_node
    from envelopay.protocol.compose import message_json

    cfg = _load(config)
    wallets = {(a.chain, a.token): a.wallet for a in cfg.accept}

    async def main() -> int:
        node = build_node(cfg, app=ClientApp(wallets))
        try:
            sent = await act(node)
            row = node.store.outbox_get(sent.message_id)
            kind = sent.outbound.message.type.upper()
            if row is not None and row.status != "sent":
                # Recorded in its flow and the outbox; a later drain delivers it (same bytes).
                typer.echo(f"queued {kind} {sent.message_id} (flow {sent.flow_id}): not delivered yet: "
                           f"{row.last_error or row.status}", err=True)
                return 1
            typer.echo(f"sent {kind} {sent.message_id} (flow {sent.flow_id}, state {sent.state})")
            if not wait:
                return 0
            answer = await follow(node, sent, timeout=timeout, progress=typer.echo)
            if answer.timed_out:
                typer.echo(f"no answer within {timeout:g} s; see: envelopay show {sent.flow_id}")
                return 1
            out = answer.outcome
            assert out is not None
            kind = answer.message.type.upper() if answer.message is not None else "?"
            typer.echo(f"received {kind} (flow {out.flow_id}, state {out.state})")
            if answer.message is not None:
                typer.echo(message_json(answer.message, indent=2))
            return 0
        finally:
            await node.close()
            node.store.close()

    try:
        code = asyncio.run(main())
    except (UsageError, ConfigError) as exc:
        _fail(str(exc))
    raise typer.Exit(code)


def _new_id(prefix: str, given: str | None) -> str:
    import secrets

    return given or f"{prefix}_{secrets.token_hex(5)}"


def _register_client(app: typer.Typer) -> None:
    # Imports stay inside the commands: `envelopay --help` must not load the engine.
    def _addr(address: str) -> str:
        from envelopay.client.buyer import check_address

        try:
            return check_address(address)
        except UsageError as exc:
            _fail(str(exc))

    def _msg(kind: str, **fields: Any) -> Any:
        from envelopay.client.buyer import build
        from envelopay.protocol.messages import MessageType, model_for

        try:
            return build(model_for(MessageType(kind)), **fields)  # type: ignore[arg-type]
        except UsageError as exc:
            _fail(str(exc))

    def _json(value: str | None, field: str) -> Any:
        from envelopay.client.buyer import parse_json_option

        try:
            return parse_json_option(value, field)
        except UsageError as exc:
            _fail(str(exc))

    async def pay_first(node: Any, **kw: Any) -> Any:
        from envelopay.client.buyer import pay_first as pay

        return await pay(node, **kw)

    @app.command("which")
    def which(address: str, config: _Config = Path("envelopay.toml"),
              task: Annotated[str | None, typer.Option("--task", help="Task (JSON) to price.")] = None,
              note: _Note = None, id: _Id = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Ask ADDRESS what it accepts (WHICH → METHODS)."""
        to = _addr(address)
        msg = _msg("which", id=_new_id("wch", id), task=_json(task, "--task"), note=note)
        _client(config, wait, timeout, lambda node: node.send(msg, to))

    @app.command("order")
    def order(address: str, task: Annotated[str, typer.Option("--task", help="Task (JSON): name + fields.")],
              config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
              flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Order work from ADDRESS (ORDER → INVOICE or FULFILL)."""
        to = _addr(address)
        msg = _msg("order", id=_new_id("ord", id), task=_json(task, "--task"), note=note)
        _client(config, wait, timeout, lambda node: node.send(msg, to, flow_id=flow))

    @app.command("pay")
    def pay(address: str,
            amount: _Amount, token: _Token, chain: _Chain,
            to_wallet: Annotated[str | None, typer.Option("--wallet", help="Recipient wallet "
                                                          "(default: the invoice's).")] = None,
            invoice: Annotated[str | None, typer.Option("--invoice", help="INVOICE id this pays.")] = None,
            config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
            flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Pay on the rail, then send PAY with the proof (PAY → FULFILL when it settles an INVOICE)."""
        to = _addr(address)
        pid = _new_id("pay", id)
        # Validate every field with a placeholder proof before any money moves.
        draft = _msg("pay", id=pid, amount=amount, token=token, chain=chain, proof={"tx": "-"},
                     invoice_ref=invoice, note=note)

        async def act(node: Any) -> Any:
            wallet = to_wallet or _invoice_wallet(node, to, invoice)
            proof = await pay_first(node, chain=draft.chain, token=draft.token, amount=draft.amount,
                                    recipient=wallet)
            return await node.send(draft.model_copy(update={"proof": proof}), to, flow_id=flow)

        _client(config, wait, timeout, act)

    @app.command("invoice")
    def invoice_cmd(address: str,
                    amount: _Amount, token: _Token, chain: _Chain,
                    wallet: Annotated[str | None, typer.Option("--wallet")] = None,
                    order_ref: Annotated[str | None, typer.Option("--order", help="ORDER id.")] = None,
                    due: Annotated[str | None, typer.Option("--due")] = None,
                    config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
                    flow: _Flow = None, wait: _Wait = False, timeout: _Timeout = 60.0) -> None:
        """Bill ADDRESS (INVOICE → PAY)."""
        to = _addr(address)
        cfg = _load(config)
        w = wallet or next((a.wallet for a in cfg.accept if a.chain == chain and a.token == token), None)
        if w is None:
            _fail(f"--wallet: no configured wallet for {chain}/{token}; give --wallet")
        msg = _msg("invoice", id=_new_id("inv", id), amount=amount, token=token, chain=chain, wallet=w,
                   order_ref=order_ref, due=due, note=note)
        _client(config, wait, timeout, lambda node: node.send(msg, to, flow_id=flow))

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
        to = _addr(address)
        cfg = _load(config)
        w = wallet or next((a.wallet for a in cfg.accept if a.chain == want_chain), None)
        draft = _msg("offer", id=_new_id("ofr", id), wallet=w, note=note,
                     give={"amount": give_amount, "token": give_token, "chain": give_chain, "to": give_to,
                           "proof": {"tx": "-"}},
                     want={"amount": want_amount, "token": want_token, "chain": want_chain})

        async def act(node: Any) -> Any:
            g = draft.give
            proof = await pay_first(node, chain=g.chain, token=g.token, amount=g.amount, recipient=g.to)
            give = g.model_copy(update={"proof": proof})
            return await node.send(draft.model_copy(update={"give": give}), to)

        _client(config, wait, timeout, act)

    @app.command("accept")
    def accept(address: str, offer_ref: Annotated[str, typer.Option("--offer", help="OFFER id.")],
               amount: _Amount, token: _Token, chain: _Chain,
               to_wallet: Annotated[str | None, typer.Option("--wallet", help="Default: OFFER's.")] = None,
               config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
               flow: _Flow = None) -> None:
        """Pay the counter-asset, then ACCEPT the OFFER with its proof."""
        to = _addr(address)
        draft = _msg("accept", id=_new_id("acc", id), offer_ref=offer_ref, amount=amount, token=token,
                     chain=chain, proof={"tx": "-"}, note=note)

        async def act(node: Any) -> Any:
            wallet = to_wallet or _offer_wallet(node, to, offer_ref)
            proof = await pay_first(node, chain=draft.chain, token=draft.token, amount=draft.amount,
                                    recipient=wallet)
            return await node.send(draft.model_copy(update={"proof": proof}), to, flow_id=flow)

        _client(config, False, 0.0, act)

    @app.command("fulfill")
    def fulfill(address: str, order_ref: Annotated[str, typer.Option("--order", help="ORDER id.")],
                result: Annotated[str, typer.Option("--result", help="Work product (JSON).")],
                config: _Config = Path("envelopay.toml"), note: _Note = None, id: _Id = None,
                flow: _Flow = None) -> None:
        """Deliver work for an ORDER (FULFILL)."""
        to = _addr(address)
        msg = _msg("fulfill", id=_new_id("ful", id), order_ref=order_ref, result=_json(result, "--result"),
                   note=note)
        _client(config, False, 0.0, lambda node: node.send(msg, to, flow_id=flow))

    @app.command("oops")
    def oops(address: str, code: Annotated[str, typer.Option("--code", help="e.g. tx_not_found.")],
             note: Annotated[str, typer.Option("--note", help="What went wrong, for a human.")],
             ref: Annotated[str | None, typer.Option("--ref", help="Id of the message concerned.")] = None,
             config: _Config = Path("envelopay.toml"), id: _Id = None, flow: _Flow = None) -> None:
        """Tell ADDRESS something went wrong (OOPS)."""
        to = _addr(address)
        msg = _msg("oops", id=_new_id("oops", id), note=note, ref=ref, error={"code": code})
        _client(config, False, 0.0, lambda node: node.send(msg, to, flow_id=flow))

    @app.command("flows")
    def flows_cmd(config: _Config = Path("envelopay.toml"),
                  limit: Annotated[int, typer.Option("--limit")] = 50) -> None:
        """A table of this agent's flows and their states."""
        from rich.console import Console
        from rich.table import Table

        from envelopay.node.wiring import open_store

        cfg = _load(config)
        store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
        try:
            rows = store.list_flows(cfg.agent.address, limit)
        finally:
            store.close()
        table = Table(title=f"flows of {cfg.agent.address}")
        for col in ("flow", "peer", "kind", "side", "state", "updated"):
            table.add_column(col)
        for f in rows:
            when = f.updated_at.isoformat(timespec="seconds")
            table.add_row(f.flow_id, f.peer, f.kind, f.side, f.state, when)
        Console().print(table)

    @app.command("show")
    def show(flow: str, config: _Config = Path("envelopay.toml")) -> None:
        """The thread of one flow, with each proof's verdict."""
        from rich.console import Console
        from rich.table import Table

        from envelopay.node.wiring import open_store

        cfg = _load(config)
        store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
        try:
            rec = store.get_flow(flow)
            log = store.flow_log(flow) if rec is not None else []
        finally:
            store.close()
        if rec is None:
            _fail(f"FLOW: no flow {flow!r} in {cfg.agent.ledger}")
        table = Table(title=f"{rec.flow_id}: {rec.kind} with {rec.peer}, {rec.side}, state {rec.state}")
        for col in ("at", "dir", "type", "id", "proof verdict", "oops", "Message-ID"):
            table.add_column(col, overflow="fold")
        for e in log:
            verdict = ""
            if e.verdict:
                verdict = str(e.verdict.get("status"))
                if e.verdict.get("reason"):
                    verdict += f" ({e.verdict['reason']})"
            at = e.at.isoformat(timespec="seconds")
            table.add_row(at, e.direction, e.type.upper(), e.protocol_id or "", verdict, e.oops or "",
                          e.message_id or "")
        Console().print(table)


def _invoice_wallet(node: Any, peer: str, invoice: str | None) -> str:
    if invoice is None:
        raise UsageError("--wallet: give the recipient wallet, or --invoice to pay an INVOICE we received")
    rec = node.store.flow_for_ref(node.address, peer, peer, invoice)
    inv = rec.data.get("invoice") if rec is not None else None
    if not isinstance(inv, dict) or not inv.get("wallet"):
        raise UsageError(f"--invoice: no INVOICE {invoice!r} from {peer} in this ledger; give --wallet")
    return str(inv["wallet"])


def _offer_wallet(node: Any, peer: str, offer: str) -> str:
    rec = node.store.flow_for_ref(node.address, peer, peer, offer)
    off = rec.data.get("offer") if rec is not None else None
    if not isinstance(off, dict) or not off.get("wallet"):
        raise UsageError(f"--offer: no OFFER {offer!r} from {peer} in this ledger; give --wallet")
    return str(off["wallet"])


_Request = Annotated[str, typer.Option("--request", help="The request: one JSON object.")]


def _register_call(app: typer.Typer) -> None:
    @app.command("call")
    def call(address: str, request: _Request, config: _Config = Path("envelopay.toml"),
             timeout: _Timeout = 60.0) -> None:
        """Call an email-as-tool endpoint (e.g. kv@garden.local) and print its reply as JSON."""
        import asyncio
        import json

        from envelopay.client.buyer import check_address, parse_json_option
        from envelopay.endpoints.calls import CallClient, LedgerCalls
        from envelopay.mail.maildir import mailbox_path
        from envelopay.node.runtime import serve_call_replies
        from envelopay.node.wiring import garden_transport, open_store

        try:
            to = check_address(address)
            payload = parse_json_option(request, "--request")
        except UsageError as exc:
            _fail(str(exc))
        if not isinstance(payload, dict):
            _fail("--request: must be one JSON object")
        cfg = _load(config)

        async def main() -> Any:
            store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
            transport = garden_transport(cfg)
            client = CallClient(LedgerCalls(store, local=cfg.agent.address), address=cfg.agent.address,
                                domain=cfg.agent.domain, send=transport.send)
            stop = asyncio.Event()
            inbox = mailbox_path(cfg.path(cfg.transport.garden_root), cfg.agent.address)
            replies = asyncio.create_task(serve_call_replies(client, inbox, stop=stop))
            try:
                return await client.call(to, payload, timeout=timeout)
            finally:
                stop.set()
                await replies
                await transport.close()
                store.close()

        try:
            result = asyncio.run(main())
        except (UsageError, ConfigError) as exc:
            _fail(str(exc))
        except TransportError as exc:
            _fail(f"transport: {exc}", 1)
        out = {"call_id": result.call_id, "status": result.status}
        out.update({"result": result.result} if result.ok else {"error": result.error})
        typer.echo(json.dumps(out, indent=2))
        raise typer.Exit(0 if result.ok else 1)
