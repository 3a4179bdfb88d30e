"""CLI commands of the rails area: `rails`, `verify`, `pay-onchain`.

`verify` and `pay-onchain` dispatch to whichever installed rail serves --chain, always
over JSON-RPC (envelopay.rails.standalone says why).

Exit codes: 0 ok; 1 the verdict is not ok (rejected, pending, unavailable) or the
payment was refused; 2 bad input (a --chain no rail serves is input here); 3 the
environment (the RPC unreachable, a wallet short of funds). `verify` and `pay-onchain`
always print JSON (--json is accepted).
"""

from __future__ import annotations

from typing import Annotated

import typer

from envelopay.cli.options import JsonOpt, PaymentOptions, payment_options
from envelopay.cli.output import FAILED, OK, answers, emit, exit_of, ran
from envelopay.errors import ConfigError, RailError, TransportError

_Rpc = Annotated[str | None, typer.Option("--rpc", envvar="ENVELOPAY_RPC_URL", help="JSON-RPC URL.")]


def rails_cmd(
    as_json: JsonOpt = False,
) -> None:
    """List the installed rails, the chains they serve and their assets."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.rails.standalone import installed_rails

    listing = installed_rails()
    if as_json:
        emit(ran("rails", rails=listing), indent=2)
        return
    if not listing:
        typer.echo("no rails installed (pip install envelopay-solana envelopay-base)")
    for entry in listing:
        typer.echo(f"{entry['rail']}  ({entry['distribution']}, {entry['entry_point']})")
        if "error" in entry:
            typer.echo(f"  cannot load: {entry['error']}")
            continue
        typer.echo(f"  chains: {', '.join(entry['chains'])}")
        for a in entry["assets"]:
            where = a["address"] or "native"
            typer.echo(f"  {a['chain']:<15} {a['symbol']:<6} {a['decimals']:>2} decimals  {where}")


@payment_options(
    chain_help="Settlement chain, e.g. solana, base-sepolia.",
    token_help="Asset symbol (USDC, SOL, ETH) or address.",
)
def verify_cmd(
    pay: PaymentOptions,
    tx: Annotated[str, typer.Option("--tx", help="Transaction id (the proof's tx).")],
    rpc: _Rpc = None,
    at_least: Annotated[bool, typer.Option("--at-least", help="Accept over-payment.")] = False,
    payer: Annotated[str | None, typer.Option("--payer", help="Require this payer wallet.")] = None,
    commitment: Annotated[str, typer.Option("--commitment", help="Solana: confirmed|finalized.")] = (
        "confirmed"),
    confirmations: Annotated[int, typer.Option("--confirmations", help="EVM confirmations (0-10,000).",
                                               min=0, max=10_000)] = 2,
    not_before: Annotated[str | None, typer.Option("--not-before", help="ISO time: earliest tx.")] = None,
    not_after: Annotated[str | None, typer.Option("--not-after", help="ISO time: latest tx time.")] = (
        None),
    as_json: JsonOpt = False,
) -> None:
    """Verify one payment proof on chain and print the verdict as JSON (exit 0 ok, 1 not ok)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.rails.standalone import verify_once

    with answers(input_kinds=(ConfigError,)):  # the rail named by --chain is input here
        chain, verdict = verify_once(
            tx, rpc=rpc, chain=pay.chain, token=pay.token, amount=pay.amount, to=pay.to,
            at_least=at_least, payer=payer, commitment=commitment, confirmations=confirmations,
            not_before=not_before, not_after=not_after,
        )
    emit({"chain": chain, "tx": tx, **verdict.to_json()}, indent=2)
    raise typer.Exit(OK if verdict.ok else FAILED)


@payment_options("Settlement chain, e.g. solana-devnet, base.", "Asset symbol or address.")
def pay_cmd(
    pay: PaymentOptions,
    keypair: Annotated[str, typer.Option("--keypair", help="The paying key file (rail format).")],
    rpc: _Rpc = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Do not wait for confirmation.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Make an on-chain payment and print its proof as JSON (for a PAY, OFFER or ACCEPT)."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.rails.standalone import chain_name, pay_once, positive_amount

    with answers(input_kinds=(ConfigError,)):  # the rail named by --chain is input here
        value = positive_amount(pay.amount)
        try:
            answer = pay_once(chain=pay.chain, token=pay.token, amount=value, to=pay.to, rpc=rpc,
                              keypair=keypair, wait=not no_wait)
        except (RailError, TransportError) as exc:
            # A wallet short of funds, the RPC unreachable: the environment (EXIT_CODES).
            code, word = exit_of(exc)
            word = "rpc_unavailable" if isinstance(exc, TransportError) else word
            left = exc.may_land() if isinstance(exc, RailError) else None
            detail = left or getattr(exc, "detail", "") or str(exc)  # left: not a failed payment
            emit({"error": word, "field": None, "detail": detail, "exit": code,
                  "chain": chain_name(pay.chain)}, indent=2)
            raise typer.Exit(code) from exc
    emit(answer, indent=2)


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    app.command("rails")(rails_cmd)
    app.command("verify")(verify_cmd)
    app.command("pay-onchain")(pay_cmd)
