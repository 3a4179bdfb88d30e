"""CLI of the spend enforcer (operator): `agent policy show|set`, `agent balances`,
`agent wallet add|list`, and the spend options of `agent create` (--wallet, --spend,
--payee, --payee-wallet, --require-invoice). Every command talks to the running enforcer
with the operator credential; none ever prints key material. Exit codes by
cli/output.EXIT_CODES; every command has --json (one document).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.operator import ask
from envelopay.cli.options import OPERATOR, OperatorOptions
from envelopay.cli.output import emit, fail, finish, ran

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


_Name = Annotated[str, typer.Argument(help="The agent's name.")]


def _document(where: OperatorOptions, doc: dict[str, Any], lines: Any) -> None:
    """A document the enforcer keeps (a policy, balances): as it is under --json, else its lines."""
    if where.as_json:
        emit(doc)
        return
    for line in lines(doc):
        typer.echo(line)


def register_spend(agent_app: typer.Typer) -> None:
    policy_app = typer.Typer(help="An agent's spend policy (operator).", no_args_is_help=True)
    wallet_app = typer.Typer(
        help="An agent's wallets, held by the enforcer (operator).", no_args_is_help=True
    )
    agent_app.add_typer(policy_app, name="policy")
    agent_app.add_typer(wallet_app, name="wallet")

    @policy_app.command("show")
    @OPERATOR
    def policy_show(where: OperatorOptions, name: _Name) -> None:
        """An agent's spend limits, payees and wallet allowlist (--json: the policy document)."""
        _document(where, ask(where, lambda op: op.get_policy(name)), describe_policy)

    @policy_app.command("set")
    @OPERATOR
    def policy_set(
        where: OperatorOptions,
        name: _Name,
        spend: SpendOpt = None,
        payee: PayeeOpt = None,
        payee_wallet: PayeeWalletOpt = None,
        require_invoice: Annotated[
            bool | None,
            typer.Option(
                "--require-invoice/--no-require-invoice", help="Pay only bound INVOICEs (pay_invoice)."
            ),
        ] = None,
    ) -> None:
        """Change an agent's spend policy: each option given replaces that part."""

        async def go(op: SpendOperatorClient) -> dict[str, Any]:
            current = await op.get_policy(name)
            doc = policy_from_options(current, spend or [], payee or [], payee_wallet or [], require_invoice)
            return await op.set_policy(name, doc)

        doc = ask(where, go)
        finish(where.as_json, ran("agent policy set", agent=name, policy=doc), describe_policy(doc))

    @agent_app.command("balances")
    @OPERATOR
    def balances(where: OperatorOptions, name: _Name) -> None:
        """An agent's wallets: chain, address and balances, never a key (--json: the balances document)."""

        def lines(doc: dict[str, Any]) -> list[str]:
            out = [] if doc["wallets"] else [
                f"{name} holds no wallet (add one: envelopay agent wallet add {name} --chain CHAIN)"]
            for w in doc["wallets"]:
                held = ", ".join(f"{v['human']} {sym} ({v['amount']})"
                                 for sym, v in w.get("balances", {}).items())
                out.append(f"{w['chain']:<16} {w['address']:<46} {w['label']:<10} "
                           f"{held or w.get('error', '')}")
            return out

        _document(where, ask(where, lambda op: op.balances(name)), lines)

    @wallet_app.command("add")
    @OPERATOR
    def wallet_add(
        where: OperatorOptions,
        name: _Name,
        chain: Annotated[str, typer.Option("--chain", help="The chain, e.g. solana-devnet.")],
        import_file: Annotated[
            str | None, typer.Option("--import", help="A key file on the enforcer's host (else a new key).")
        ] = None,
        label: Annotated[str, typer.Option("--label")] = "default",
    ) -> None:
        """Give an agent a wallet: a new key, or one imported from a file. The key stays in the enforcer."""
        w = ask(where, lambda op: op.add_wallet(name, chain, label=label, import_file=import_file))
        finish(where.as_json, ran("agent wallet add", agent=name, wallet=w),
               [f"{name}: {w['chain']} wallet {w['address']} ({w['label']})"])

    @wallet_app.command("list")
    @OPERATOR
    def wallet_list(where: OperatorOptions, name: _Name) -> None:
        """An agent's wallets: chain, address, label."""
        rows = ask(where, lambda op: op.wallets(name))
        finish(where.as_json, ran("agent wallet list", agent=name, wallets=rows),
               [f"{w['chain']:<16} {w['address']:<46} {w['label']}" for w in rows]
               or [f"{name} holds no wallet"])

    _ = (policy_show, policy_set, balances, wallet_add, wallet_list)


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
