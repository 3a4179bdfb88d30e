"""CLI commands of the rails area: `rails`, `verify`, `pay-onchain`.

`verify` and `pay-onchain` dispatch to whichever installed rail serves --chain
(chain names are `<rail>` or `<rail>-<network>`), always over JSON-RPC: a local chain
lives inside the process that created it, so a separate CLI process reaches one only
through an RPC endpoint (for instance a dev node serving it).

Exit codes: 0 ok; 1 the verdict is not ok (rejected, pending, unavailable) or the
payment failed; 2 usage or configuration error.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

import typer

from envelopay.cli.options import JsonObjectOpt, PaymentOptions, payment_options
from envelopay.cli.output import emit, fail

_Rpc = Annotated[str | None, typer.Option("--rpc", envvar="ENVELOPAY_RPC_URL", help="JSON-RPC URL.")]

# An rpc-backend rail never connects when built: the cheap way to read its registry.
_LISTING_OPTIONS = {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/"}


def _amount(value: str) -> int:
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        fail(f"--amount must be a positive integer in the asset's smallest unit, not {value!r}")
    return int(text)


def _when(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"--{name}: not an ISO 8601 time ({value!r})")
    if parsed.tzinfo is None:
        fail(f"--{name}: give a time zone (e.g. 2026-11-30T12:00:00Z)")
    return parsed


async def _close(rail: Any) -> None:
    closer = getattr(rail, "aclose", None)
    if closer is not None:
        await closer()


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""

    @app.command("rails")
    def rails_cmd(
        as_json: JsonObjectOpt = False,
    ) -> None:
        """List the installed rails, the chains they serve and their assets."""
        from envelopay.errors import EnvelopayError
        from envelopay.rails.registry import discover, make

        listing: list[dict[str, Any]] = []
        for name, plugin in sorted(discover().items()):
            entry: dict[str, Any] = {"rail": name, "distribution": plugin.distribution,
                                     "entry_point": plugin.value}
            try:
                rail = make(name, _LISTING_OPTIONS)
            except (EnvelopayError, ImportError, TypeError, ValueError) as exc:
                entry["error"] = f"{type(exc).__name__}: {exc}"
            else:
                assets = rail.assets()
                entry["chains"] = sorted({a.chain for a in assets})
                entry["assets"] = [
                    {"chain": a.chain, "symbol": a.symbol, "address": a.address, "decimals": a.decimals}
                    | ({"program": a.program} if a.program else {})
                    for a in assets
                ]
                asyncio.run(_close(rail))
            listing.append(entry)
        if as_json:
            emit({"rails": listing}, indent=2)
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

    @app.command("verify")
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
        confirmations: Annotated[int, typer.Option("--confirmations", help="EVM confirmations.", min=0)] = 2,
        not_before: Annotated[str | None, typer.Option("--not-before", help="ISO time: earliest tx.")] = None,
        not_after: Annotated[str | None, typer.Option("--not-after", help="ISO time: latest tx time.")] = (
            None),
    ) -> None:
        """Verify one payment proof on chain and print the verdict as JSON (exit 0 ok, 1 not ok)."""
        from envelopay.errors import ConfigError
        from envelopay.rails.interface import Expectation
        from envelopay.rails.registry import rail_for_chain

        if commitment not in ("processed", "confirmed", "finalized"):
            fail("--commitment must be processed, confirmed or finalized")
        if rpc is None:
            fail("--rpc URL (or ENVELOPAY_RPC_URL) is required: the CLI verifies over JSON-RPC")
        expectation = Expectation(
            chain=pay.chain.strip().lower(), token=pay.token, amount=_amount(pay.amount), recipient=pay.to,
            amount_policy="at_least" if at_least else "exact", payer=payer,
            not_before=_when("not-before", not_before), not_after=_when("not-after", not_after),
            commitment=commitment,  # type: ignore[arg-type]  # checked above
            confirmations=confirmations,
        )
        try:
            rail = rail_for_chain(pay.chain, {"backend": "rpc", "rpc_url": rpc})
        except ConfigError as exc:
            fail(str(exc))

        async def run() -> Any:
            try:
                return await rail.verify({"tx": tx}, expectation)
            finally:
                await _close(rail)

        verdict = asyncio.run(run())
        emit({"chain": expectation.chain, "tx": tx, **verdict.to_json()}, indent=2)
        raise typer.Exit(0 if verdict.ok else 1)

    @app.command("pay-onchain")
    @payment_options("Settlement chain, e.g. solana-devnet, base.", "Asset symbol or address.")
    def pay_cmd(
        pay: PaymentOptions,
        keypair: Annotated[str, typer.Option("--keypair", help="The paying key file (rail format).")],
        rpc: _Rpc = None,
        no_wait: Annotated[bool, typer.Option("--no-wait", help="Do not wait for confirmation.")] = False,
    ) -> None:
        """Make an on-chain payment and print its proof as JSON (for a PAY, OFFER or ACCEPT)."""
        from envelopay.errors import ConfigError, RailError, TransportError, UsageError
        from envelopay.rails.registry import rail_for_chain

        value = _amount(pay.amount)
        if rpc is None:
            fail("--rpc URL (or ENVELOPAY_RPC_URL) is required: the CLI pays over JSON-RPC")
        options: dict[str, Any] = {"backend": "rpc", "rpc_url": rpc, "keypair": keypair}
        if no_wait:
            options["confirm_timeout"] = 0
        try:
            rail = rail_for_chain(pay.chain, options)
        except ConfigError as exc:
            fail(str(exc))
        normalized = pay.chain.strip().lower()

        async def run() -> dict[str, Any]:
            try:
                return await rail.pay(chain=normalized, token=pay.token, amount=value, recipient=pay.to)
            finally:
                await _close(rail)

        try:
            proof = asyncio.run(run())
        except (ConfigError, UsageError) as exc:
            fail(str(exc))
        except RailError as exc:
            emit({"chain": normalized, "error": exc.reason, "detail": exc.detail}, indent=2)
            raise typer.Exit(1) from exc
        except TransportError as exc:
            down = {"chain": normalized, "error": "rpc_unavailable", "detail": str(exc)}
            emit(down, indent=2)
            raise typer.Exit(1) from exc
        answer: dict[str, Any] = {"chain": normalized, "proof": proof, "proof_key": rail.proof_key(proof)}
        emit(answer, indent=2)
