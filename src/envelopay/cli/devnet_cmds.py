"""CLI commands of the devnet area: `devnet up|down|status` and `fund`.

Exit codes by cli/output.EXIT_CODES: 2 bad input; 3 the environment (no devnet runs,
one already runs, a service does not answer, a port in use). Each has --json; the
foreground `devnet up --json` prints its one document once the devnet is up.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer

from envelopay.cli.options import MAX_PORT, JsonOpt
from envelopay.cli.output import ENVIRONMENT, OK, answers, emit, fail, finish, ran

# A slot count past it is a devnet that never confirms (about 1 h 7 min at 0.4 s a slot).
MAX_SLOTS = 10_000

_Home = Annotated[Path | None, typer.Option(
    "--home", envvar="ENVELOPAY_DEVNET_HOME",
    help="The devnet's directory (state file, garden, agents); default ~/.envelopay/devnet.")]


devnet_app = typer.Typer(no_args_is_help=True,
                         help="Run the shared local chains, garden and DKIM table of this machine's agents.")


@devnet_app.command("up")
def up(
    home: _Home = None,
    solana_port: Annotated[int, typer.Option(envvar="ENVELOPAY_DEVNET_SOLANA_PORT", min=0, max=MAX_PORT,
                                             help="Solana JSON-RPC port (0: any free one).")] = 8899,
    base_port: Annotated[int, typer.Option(envvar="ENVELOPAY_DEVNET_BASE_PORT", min=0, max=MAX_PORT,
                                           help="Base JSON-RPC port (0: any free one).")] = 8545,
    slot_time: Annotated[float, typer.Option(help="Seconds per Solana slot.")] = 0.4,
    confirmed_after: Annotated[int, typer.Option(min=0, max=MAX_SLOTS,
                                                 help="Slots until a transaction is confirmed.")] = 2,
    finalized_after: Annotated[int, typer.Option(min=0, max=MAX_SLOTS,
                                                 help="Slots until a transaction is finalized.")] = 32,
    block_time: Annotated[float, typer.Option(help="Seconds per Base block.")] = 2.0,
    base_node: Annotated[str, typer.Option(help="auto (anvil if found) | anvil | eth-tester.")] = "auto",
    detach: Annotated[bool, typer.Option(help="Run in the background (log: <home>/devnet.log).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Start the devnet (in the foreground: Ctrl-C stops it; `envelopay devnet down` stops either)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.devnet.run import DevnetOptions, describe, run_devnet, start_detached
    from envelopay.devnet.state import devnet_home
    if base_node not in ("auto", "anvil", "eth-tester"):
        fail("--base-node: auto, anvil or eth-tester")
    # `not 0 < t <= day`, not `t <= 0`: NaN and inf compare False and would start a devnet
    # that never ticks (and print NaN, which is not JSON).
    if not (0 < slot_time <= 86_400 and 0 < block_time <= 86_400) \
            or not 0 <= confirmed_after <= finalized_after:
        fail("--slot-time and --block-time must be positive seconds (at most a day); "
             "0 <= --confirmed-after <= --finalized-after")
    options = DevnetOptions(solana_port, base_port, slot_time, confirmed_after, finalized_after,
                            block_time, base_node)
    where = devnet_home(home)
    if detach:
        argv = ["devnet", "up", "--home", str(where), "--solana-port", str(solana_port), "--base-port",
                str(base_port), "--slot-time", str(slot_time), "--confirmed-after", str(confirmed_after),
                "--finalized-after", str(finalized_after), "--block-time", str(block_time),
                "--base-node", base_node]
        with answers():
            state = start_detached(where, argv)
        finish(as_json, ran("devnet up", state=state.to_json(), detached=True),
               [*describe(state), "devnet up in the background; `envelopay devnet down` stops it"])

    def echo(line: str) -> None:
        typer.echo(line, err=as_json)
        if as_json and line.startswith("devnet up"):  # the one document: it is up, and where
            # lazy: the command's room loads when it runs, not at CLI start
            from envelopay.devnet.state import read_state

            emit(ran("devnet up", state=read_state(where).to_json(), detached=False))

    try:
        with answers():
            asyncio.run(run_devnet(where, options, echo=echo))
    except OSError as exc:  # a port in use, a directory we cannot write
        fail(f"{exc.strerror or exc}; pick other ports with --solana-port / --base-port", ENVIRONMENT)


@devnet_app.command("down")
def down(home: _Home = None, as_json: JsonOpt = False) -> None:
    """Stop the running devnet and wait until it has stopped."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.devnet.run import stop_devnet
    from envelopay.devnet.state import devnet_home

    with answers():
        state = stop_devnet(devnet_home(home))
    finish(as_json, ran("devnet down", pid=state.pid), [f"devnet (pid {state.pid}) stopped"])


@devnet_app.command("status")
def status(home: _Home = None, as_json: JsonOpt = False) -> None:
    """Say what runs where and whether each service answers (exit 3 if one does not)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.devnet.run import describe, probe
    from envelopay.devnet.state import devnet_home, read_state

    with answers():
        state = read_state(devnet_home(home))
    heard = asyncio.run(probe(state))
    code = ENVIRONMENT if any(a.startswith("down") for a in heard.values()) else OK
    finish(as_json, ran("devnet status", code, state=state.to_json(), services=heard),
           [*describe(state), *(f"{name}: {answer}" for name, answer in heard.items())])


def fund_cmd(
    target: Annotated[str, typer.Argument(help="A registered agent address, or a wallet.")],
    sol: Annotated[str | None, typer.Option(help="SOL to airdrop (e.g. 1).")] = None,
    eth: Annotated[str | None, typer.Option(help="ETH to give on Base (e.g. 0.5).")] = None,
    usdc: Annotated[str | None, typer.Option(help="USDC to mint (e.g. 100) on each chain.")] = None,
    chain: Annotated[str | None, typer.Option(help="Only this chain: solana or base.")] = None,
    home: _Home = None,
    as_json: JsonOpt = False,
) -> None:
    """Fund a wallet from the devnet's faucet (the devnet only; never a real chain)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.devnet.fund import fund, funded_text, plan_funding
    from envelopay.devnet.state import devnet_home, read_state

    where = devnet_home(home)
    with answers():
        state = read_state(where)
        plan = plan_funding(where, target, sol=sol, eth=eth, usdc=usdc, chain=chain)
        done = asyncio.run(fund(state, plan))
    funded = [{"chain": i.chain, "wallet": i.wallet, "native": str(i.native), "usdc": str(i.usdc)}
              for i in done]
    finish(as_json, ran("fund", funded=funded), [funded_text(i) for i in done])


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.add_typer(devnet_app, name="devnet")
    app.command("fund")(fund_cmd)
