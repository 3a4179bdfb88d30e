"""`envelopay agent …`: the operator's commands for leashed agents — create, list,
kill; each agent's spend policy (`agent policy show|set`), balances and wallets
(`agent wallet add|list`). Every command talks to the running enforcer with the operator
credential (cli/operator.ask), never to its database, and never prints key material.
Exit codes by cli/output.EXIT_CODES; every command has --json (one document).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from envelopay.cli.operator import ask, listing
from envelopay.cli.options import OPERATOR, AfterOpt, LimitOpt, OperatorOptions
from envelopay.cli.output import answers, emit, fail, finish, ran
from envelopay.cli.spend_options import (
    PayeeOpt,
    PayeeWalletOpt,
    SpendOpt,
    WalletOpt,
    apply_create_options,
    describe_policy,
    policy_from_options,
    wallet_specs,
)

if TYPE_CHECKING:
    from envelopay.enforcer.client.payment_client import SpendOperatorClient

agent_app = typer.Typer(help="Leashed agent identities (operator).", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add `agent` and its subcommands to the top-level app."""
    app.add_typer(agent_app, name="agent")


@agent_app.command("create")
@OPERATOR
def agent_create(
    where: OperatorOptions,
    name: Annotated[str, typer.Argument(help="Agent name (a-z 0-9 _ -).")],
    address: Annotated[str, typer.Option("--address", help="The agent's own address (sender pin).")],
    allow: Annotated[list[str] | None, typer.Option("--allow", help="Allowlisted address or domain.")]
    = None,
    hourly: Annotated[int, typer.Option("--hourly", help="Sends per hour before approval.")] = 20,
    daily: Annotated[int, typer.Option("--daily", help="Sends per day before approval.")] = 100,
    wallet: WalletOpt = None,
    spend: SpendOpt = None,
    payee: PayeeOpt = None,
    payee_wallet: PayeeWalletOpt = None,
    require_invoice: Annotated[bool, typer.Option(
        "--require-invoice", help="Pay only bound INVOICEs (pay_invoice).")] = False,
    devnet: Annotated[bool, typer.Option(
        "--devnet", help="Give the agent a mailbox in the running devnet's garden.")] = False,
) -> None:
    """Create an agent and print its token (shown once; only its hash is stored) as
    `export` lines for its MCP client. With --wallet and --spend, its wallets (held by
    the enforcer) and spend policy too; with --devnet, its garden mailbox."""
    wallets = wallet_specs(wallet or [])
    spends = bool(spend or payee or payee_wallet or require_invoice)
    policy = policy_from_options({}, spend or [], payee or [], payee_wallet or [], require_invoice) \
        if spends else None
    if devnet:  # before the agent exists: no devnet, no agent half made
        # lazy: the command's room loads when it runs, not at CLI start
        from envelopay.devnet.state import read_state

        with answers():
            read_state()
    agent, token = ask(where, lambda op: op.create_agent(
        name, address, allow=tuple(allow or ()), hourly=hourly, daily=daily))
    lines = [f"created agent {agent['name']} <{agent['address']}>: {agent['summary']}"]
    made: list[dict[str, Any]] = []
    if wallets or policy is not None:
        made = ask(where, lambda op: apply_create_options(op, name, wallets, policy))
        lines += [f"wallet {w['chain']} {w['address']} ({w['label']})" for w in made]
        lines += describe_policy(policy) if policy is not None else []
    env = {"ENVELOPAY_ENFORCER": absolute_enforcer(where.url),
           "ENVELOPAY_AGENT_ADDRESS": agent["address"], "ENVELOPAY_AGENT_TOKEN": token}
    garden = _admit_on_devnet(agent["address"], made, lines) if devnet else None
    if garden is not None:
        env["ENVELOPAY_AGENT_MAILDIR"] = str(garden["maildir"])
    lines.append("Save this token now; it is shown only once. MCP client configuration:")
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    finish(where.as_json, ran("agent create", agent=agent, token=token, wallets=made, policy=policy,
                                 env=env, devnet=garden), lines)

@agent_app.command("list")
@OPERATOR
def agent_list(where: OperatorOptions, limit: LimitOpt = 100, after: AfterOpt = None) -> None:
    """List agents by name, one page: address, status and policy."""
    rows, nxt = ask(where, lambda op: op.agents_page(limit, after))
    listing(where, "agent list", "agents", rows, nxt,
             "no agents (create one with: envelopay agent create NAME --address ADDR)",
             lambda a: f"{a['name']:<20} {a['address']:<32} {a['status']:<7} {a['summary']}")

@agent_app.command("kill")
@OPERATOR
def agent_kill(where: OperatorOptions, name: Annotated[str, typer.Argument()]) -> None:
    """Kill an agent: terminal; its token does nothing from now on."""
    agent = ask(where, lambda op: op.kill_agent(name))
    if agent is None:
        fail(f"NAME: no agent named {name!r}")
    finish(where.as_json, ran("agent kill", agent=agent), [f"killed {name}"])


def absolute_enforcer(url: str) -> str:
    """Where the enforcer is, usable from any folder: a URL as given, a socket path made
    absolute (an MCP client is often started elsewhere than the operator's shell)."""
    if url.startswith(("http://", "https://")):
        return url
    return str(Path(url).expanduser().absolute())


def _admit_on_devnet(address: str, made: list[dict[str, Any]], lines: list[str]) -> dict[str, object]:
    """The agent's garden mailbox on the devnet, and the enforcer's garden account let
    send as it (devnet/leash.py); what was done is added to `lines`."""
    # lazy: the command's room loads when it runs, not at CLI start
    from envelopay.devnet.leash import admit_leashed_agent

    user = os.environ.get("ENVELOPAY_GARDEN_USER") or "enforcer"
    with answers():
        box = admit_leashed_agent(address, {w["chain"]: w["address"] for w in made}, sender=user)
    lines.append(f"garden mailbox {box.maildir}")
    if box.sender is None:
        lines.append(f"warning: the garden has no account {user!r} to send as {address}; run "
                     f"`envelopay garden account {user} -a {address} --accounts DEVNET/garden-accounts.json`"
                     " and give its secret to the enforcer ($ENVELOPAY_GARDEN_SECRET)")
    return box.to_json()


_Name = Annotated[str, typer.Argument(help="The agent's name.")]


def _document(where: OperatorOptions, doc: dict[str, Any], lines: Any) -> None:
    """A document the enforcer keeps (a policy, balances): as it is under --json, else its lines."""
    if where.as_json:
        emit(doc)
        return
    for line in lines(doc):
        typer.echo(line)


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
