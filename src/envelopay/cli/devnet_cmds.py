"""CLI commands of the devnet area: `devnet up|down|status` and `fund`.

Exit codes: 0 ok; 1 the devnet is not running or a service does not answer (status),
or it did not stop (down); 2 usage or configuration error.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

_Home = Annotated[Path | None, typer.Option(
    "--home", envvar="ENVELOPAY_DEVNET_HOME",
    help="The devnet's directory (state file, garden, agents); default ~/.envelopay/devnet.")]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    devnet = typer.Typer(no_args_is_help=True,
                         help="Run the shared local chains, garden and DKIM table of this machine's agents.")
    app.add_typer(devnet, name="devnet")

    @devnet.command("up")
    def up(
        home: _Home = None,
        solana_port: Annotated[int, typer.Option(envvar="ENVELOPAY_DEVNET_SOLANA_PORT",
                                                 help="Solana JSON-RPC port (0: any free one).")] = 8899,
        base_port: Annotated[int, typer.Option(envvar="ENVELOPAY_DEVNET_BASE_PORT",
                                               help="Base JSON-RPC port (0: any free one).")] = 8545,
        slot_time: Annotated[float, typer.Option(help="Seconds per Solana slot.")] = 0.4,
        confirmed_after: Annotated[int, typer.Option(help="Slots until a transaction is confirmed.")] = 2,
        finalized_after: Annotated[int, typer.Option(help="Slots until a transaction is finalized.")] = 32,
        block_time: Annotated[float, typer.Option(help="Seconds per Base block.")] = 2.0,
        base_node: Annotated[str, typer.Option(help="auto (anvil if found) | anvil | eth-tester.")] = "auto",
        detach: Annotated[bool, typer.Option(help="Run in the background (log: <home>/devnet.log).")] = False,
    ) -> None:
        """Start the devnet (in the foreground: Ctrl-C stops it; `envelopay devnet down` stops either)."""
        from envelopay.devnet.run import DevnetOptions, describe, run_devnet, start_detached
        from envelopay.devnet.state import devnet_home
        from envelopay.errors import EnvelopayError

        if base_node not in ("auto", "anvil", "eth-tester"):
            raise _fail("--base-node: auto, anvil or eth-tester")
        if slot_time <= 0 or block_time <= 0 or not 0 <= confirmed_after <= finalized_after:
            raise _fail("--slot-time and --block-time must be positive; "
                        "0 <= --confirmed-after <= --finalized-after")
        options = DevnetOptions(solana_port, base_port, slot_time, confirmed_after, finalized_after,
                                block_time, base_node)
        where = devnet_home(home)
        if detach:
            argv = ["devnet", "up", "--home", str(where), "--solana-port", str(solana_port), "--base-port",
                    str(base_port), "--slot-time", str(slot_time), "--confirmed-after", str(confirmed_after),
                    "--finalized-after", str(finalized_after), "--block-time", str(block_time),
                    "--base-node", base_node]
            try:
                state = start_detached(where, argv)
            except EnvelopayError as exc:
                raise _fail(str(exc)) from exc
            for line in describe(state):
                typer.echo(line)
            typer.echo("devnet up in the background; `envelopay devnet down` stops it")
            return
        try:
            asyncio.run(run_devnet(where, options, echo=typer.echo))
        except EnvelopayError as exc:
            raise _fail(str(exc)) from exc
        except OSError as exc:  # a port in use, a directory we cannot write
            raise _fail(f"{exc.strerror or exc}; pick other ports with --solana-port / --base-port") from exc

    @devnet.command("down")
    def down(home: _Home = None) -> None:
        """Stop the running devnet and wait until it has stopped."""
        from envelopay.devnet.run import stop_devnet
        from envelopay.devnet.state import devnet_home
        from envelopay.errors import ConfigError

        try:
            state = stop_devnet(devnet_home(home))
        except ConfigError as exc:
            raise _fail(str(exc), 1) from exc
        typer.echo(f"devnet (pid {state.pid}) stopped")

    @devnet.command("status")
    def status(home: _Home = None) -> None:
        """Say what runs where and whether each service answers."""
        from envelopay.devnet.run import describe, probe
        from envelopay.devnet.state import devnet_home, read_state
        from envelopay.errors import ConfigError

        try:
            state = read_state(devnet_home(home))
        except ConfigError as exc:
            raise _fail(str(exc), 1) from exc
        for line in describe(state):
            typer.echo(line)
        answers = asyncio.run(probe(state))
        for name, answer in answers.items():
            typer.echo(f"{name}: {answer}")
        if any(a.startswith("down") for a in answers.values()):
            raise typer.Exit(1)

    @app.command("fund")
    def fund_cmd(
        target: Annotated[str, typer.Argument(help="A registered agent address, or a wallet.")],
        sol: Annotated[str | None, typer.Option(help="SOL to airdrop (e.g. 1).")] = None,
        eth: Annotated[str | None, typer.Option(help="ETH to give on Base (e.g. 0.5).")] = None,
        usdc: Annotated[str | None, typer.Option(help="USDC to mint (e.g. 100) on each chain.")] = None,
        chain: Annotated[str | None, typer.Option(help="Only this chain: solana or base.")] = None,
        home: _Home = None,
    ) -> None:
        """Fund a wallet from the devnet's faucet (the devnet only; never a real chain)."""
        from envelopay.devnet.fund import fund, plan_funding
        from envelopay.devnet.state import devnet_home, read_state
        from envelopay.errors import EnvelopayError

        where = devnet_home(home)
        try:
            state = read_state(where)
            plan = plan_funding(where, target, sol=sol, eth=eth, usdc=usdc, chain=chain)
            done = asyncio.run(fund(state, plan))
        except EnvelopayError as exc:
            raise _fail(str(exc)) from exc
        for item in done:
            native = "lamports" if item.chain.startswith("solana") else "wei"
            typer.echo(f"{item.chain} {item.wallet}: +{item.native} {native}, +{item.usdc} USDC units")
