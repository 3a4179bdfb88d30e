"""The spend options of `agent create` and `agent policy set` (--wallet, --spend,
--payee, --payee-wallet, --require-invoice) read into a spend policy document and wallet
specs, and a policy described in lines. The commands are in cli/agent_cmds.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.output import fail

if TYPE_CHECKING:
    from envelopay.enforcer.client.payment_client import SpendOperatorClient

SpendOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--spend", help="CHAIN/TOKEN=AMOUNT/WINDOW[,...] with windows payment, hour, day (smallest units)."
    ),
]
PayeeOpt = Annotated[list[str] | None, typer.Option("--payee", help="Allowed payee: an address or a domain.")]
PayeeWalletOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--payee-wallet", help="Allowed payee wallet (once any is given, only these are paid unattended)."
    ),
]
WalletOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--wallet", help="CHAIN=new (the enforcer makes a key) or CHAIN=FILE (import a key file on its host)."
    ),
]


def policy_from_options(
    base: dict[str, Any],
    spend: Sequence[str],
    payees: Sequence[str],
    wallets: Sequence[str],
    require_invoice: bool | None,
) -> dict[str, Any]:
    """The spend policy document with the options applied (each given field replaces)."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.spend.policy import SpendPolicy, parse_spend

    try:
        policy = SpendPolicy.from_json(base)
        for text in spend:
            key, limit = parse_spend(text)
            policy = policy.with_limit(key, limit)
        doc = policy.to_json()
        if payees:
            doc["payees"] = list(payees)
        if wallets:
            doc["wallets"] = list(wallets)
        if require_invoice is not None:
            doc["require_invoice"] = require_invoice
        return SpendPolicy.from_json(doc).to_json()
    except ValueError as exc:
        fail(str(exc))


def wallet_specs(specs: Sequence[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for spec in specs:
        chain, sep, source = spec.partition("=")
        if not sep or not chain.strip() or not source.strip():
            fail(f"--wallet {spec!r}: expected CHAIN=new or CHAIN=FILE")
        out.append((chain.strip(), None if source.strip() == "new" else source.strip()))
    return out


def describe_policy(doc: dict[str, Any]) -> list[str]:
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.spend.policy import SpendLimit, format_spend

    lines = [
        f"spend    {format_spend(k, SpendLimit(v.get('per_payment'), v.get('hourly'), v.get('daily')))}"
        for k, v in doc.get("limits", {}).items()
    ] or ["spend    (none: every payment waits for approval)"]
    lines.append(f"payees   {', '.join(doc.get('payees', [])) or '(none)'}")
    lines.append(f"wallets  {', '.join(doc.get('wallets', [])) or '(any)'}")
    lines.append(f"require_invoice  {'yes' if doc.get('require_invoice') else 'no'}")
    return lines




async def apply_create_options(
    op: SpendOperatorClient,
    name: str,
    wallets: Sequence[tuple[str, str | None]],
    policy: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """After `agent create`: the wallets, then the spend policy."""
    made = [await op.add_wallet(name, chain, import_file=source) for chain, source in wallets]
    if policy is not None:
        await op.set_policy(name, policy)
    return made
