"""CLI of the send enforcer: `enforcer serve`, `agent create|list|kill`,
`approvals list|show|approve|reject|retry`, and `mcp` (the agents' MCP front).

Operator commands talk to the running service with the operator credential (never to
the database directly). Exit codes by cli/output.EXIT_CODES; `approvals approve|retry`
exit by what became of the send (cli/operator.decision_exit). `enforcer serve --json`
prints one document when it listens (README "Output and exit codes").
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from envelopay.cli.approval_lines import approval_lines
from envelopay.cli.maintained import ENFORCER_TABLE, missing_store
from envelopay.cli.operator import ask, decision_exit
from envelopay.cli.options import (
    DEFAULT_TOKEN_FILE,
    MAX_PORT,
    OPERATOR,
    RETENTION,
    AfterOpt,
    JsonOpt,
    LimitOpt,
    OperatorOptions,
    Retention,
    TokenFileOpt,
)
from envelopay.cli.output import ENVIRONMENT, FAILED, answers, emit, fail, finish, next_page, ran
from envelopay.cli.spend_cmds import (
    PayeeOpt,
    PayeeWalletOpt,
    SpendOpt,
    WalletOpt,
    apply_create_options,
    describe_policy,
    policy_from_options,
    register_spend,
    wallet_specs,
)
from envelopay.errors import ConfigError

T = TypeVar("T")

_SEC = "starttls | tls | none"
_USER = "SMTP user; the password comes from $ENVELOPAY_SMTP_PASSWORD"
_GARDEN = "Deliver into the walled garden: its LMTP socket path or port."


def _run(coro_fn: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await coro_fn()

    with answers():
        return asyncio.run(main())
    raise AssertionError("unreachable")  # for mypy: `answers` ends the command on any error


def _store(db: str) -> Any:
    """The store --db names, not yet opened. Every command taking --db reads it the same
    way: a URL of no store we know, or a SQLite path that cannot be one (a directory, a
    file that is not a SQLite database, under no directory), is bad input (2, naming
    --db: serve said 3 where compact said 2); a server that does not answer is the
    environment (3, EXIT_CODES)."""
    # lazy: keeps httpx off this module's import
    from envelopay.enforcer.send.store import SqliteStore, open_store

    try:
        store = open_store(db)
    except ConfigError as exc:
        fail(f"--db: {exc}")
    if isinstance(store, SqliteStore):
        problem = _sqlite_path_problem(Path(store.path))
        if problem is not None:
            fail(f"--db: {problem}")
    return store


_SQLITE_HEADER = b"SQLite format 3\x00"


def _sqlite_path_problem(path: Path) -> str | None:
    if path.exists() and not path.is_file():
        return f"{path} is not a file"
    if not path.parent.is_dir():
        return f"no such directory: {path.parent}"
    if path.is_file() and path.stat().st_size:
        with path.open("rb") as f:
            if f.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                return f"{path} is not a SQLite database"
    return None


def register(app: typer.Typer) -> None:
    """Add this area's commands to the top-level app."""
    enforcer_app = typer.Typer(help="The send enforcer service.", no_args_is_help=True)
    agent_app = typer.Typer(help="Leashed agent identities (operator).", no_args_is_help=True)
    approvals_app = typer.Typer(help="The approval queue (operator).", no_args_is_help=True)
    app.add_typer(enforcer_app, name="enforcer")
    app.add_typer(agent_app, name="agent")
    app.add_typer(approvals_app, name="approvals")

    @enforcer_app.command("serve")
    def serve(
        db: Annotated[str, typer.Option("--db", help="sqlite:///PATH, a file path, or postgresql://...")],
        port: Annotated[int, typer.Option("--port", min=0, max=MAX_PORT, help="Loopback TCP port.")] = 8725,
        host: Annotated[str, typer.Option("--host", help="Loopback address to bind.")] = "127.0.0.1",
        socket: Annotated[Path | None, typer.Option("--socket", help="Listen on this Unix socket.")] = None,
        console_port: Annotated[int | None, typer.Option(
            "--console-port", min=1, max=65535,
            help="With --socket: also serve on loopback at this port, for a browser's /console.")] = None,
        token_file: TokenFileOpt = Path(DEFAULT_TOKEN_FILE),
        smtp_host: Annotated[str | None, typer.Option("--smtp-host")] = None,
        smtp_port: Annotated[int, typer.Option("--smtp-port", min=1, max=MAX_PORT)] = 587,
        smtp_security: Annotated[str, typer.Option("--smtp-security", help=_SEC)] = "starttls",
        smtp_user: Annotated[str | None, typer.Option("--smtp-user", help=_USER)] = None,
        garden: Annotated[str | None, typer.Option("--garden", help=_GARDEN)] = None,
        dkim_key: Annotated[Path | None, typer.Option("--dkim-key", help="PEM private key.")] = None,
        dkim_selector: Annotated[str, typer.Option("--dkim-selector")] = "envelopay",
        dkim_domain: Annotated[str | None, typer.Option("--dkim-domain")] = None,
        vault_key_file: Annotated[Path | None, typer.Option(
            "--vault-key-file", help="Seals the agents' wallet keys (or $ENVELOPAY_ENFORCER_VAULT_SECRET).")]
        = None,
        pay_rail: Annotated[list[str] | None, typer.Option(
            "--pay-rail", help="CHAIN[=RPC_URL]: pay on this chain from the agents' wallets.")] = None,
        inbox_root: Annotated[Path | None, typer.Option(
            "--inbox-root", help="ROOT/<address>/ Maildirs (the garden's), read for pay_invoice.")] = None,
        dkim_dns: Annotated[str, typer.Option(
            "--dkim-dns", help="Where INVOICE DKIM keys are looked up: resolver (DNS), or devnet "
            "(the devnet's key table, as init --devnet's agents).")] = "resolver",
        as_json: JsonOpt = False,
    ) -> None:
        """Run the enforcer: the only holder of the SMTP credential, the DKIM key and the
        agents' wallet keys."""
        # lazy: keeps cryptography, httpx off this module's import
        from envelopay.enforcer.service.launch import prepare, serve
        from envelopay.enforcer.service.spend_launch import prepare_spend
        from envelopay.node.wiring import dns_setup

        _store(db)  # not opened: a URL of no store we know is refused first, as by compact
        # Its configuration is its flags: a ConfigError here names one (bad input, exit 2).
        with answers(input_kinds=(ConfigError,)):
            launch = prepare(
                db=db, token_file=token_file, garden=garden, smtp_host=smtp_host, smtp_port=smtp_port,
                smtp_security=smtp_security, smtp_user=smtp_user, dkim_key=dkim_key,
                dkim_selector=dkim_selector, dkim_domain=dkim_domain,
                token_created=lambda p: typer.echo(f"operator token written to {p} (mode 600)", err=True),
            )
            if dkim_dns not in ("resolver", "devnet"):
                raise ConfigError(f"--dkim-dns {dkim_dns!r}: resolver or devnet")
            spend = prepare_spend(vault_key_file=vault_key_file, pay_rails=pay_rail or [],
                                  inbox_root=inbox_root, dns=dns_setup(dkim_dns, {}))

        def listening(where: object) -> None:
            typer.echo(f"enforcer listening on {where}", err=True)
            if as_json:  # the one document: ready, and where (a long-running command)
                emit(ran("enforcer serve", listening=str(where), operator_token_file=str(token_file)))

        try:
            _run(lambda: serve(launch, host=host, port=port, socket=socket, spend=spend, listening=listening,
                               console_port=console_port, stopped=lambda line: typer.echo(line, err=True)))
        except OSError as exc:  # a port in use, a socket path we cannot bind
            fail(f"cannot listen: {exc.strerror or exc}", ENVIRONMENT)

    @enforcer_app.command("compact")
    @RETENTION
    def compact(
        keep: Retention,
        db: Annotated[str, typer.Option("--db", help="The enforcer's store, as given to serve.")],
    ) -> None:
        """Retention: delete finished sends older than the window, their spent claims and
        past cap and spend counters; compact finished payments (kept: what answers a retry
        and refuses a second payment of an INVOICE). Runs beside a serving enforcer (short
        statements on the same store)."""
        # lazy: keeps cryptography, httpx off this module's import
        from envelopay.enforcer.service.retention import compact_enforcer

        store = _store(db)
        with answers(as_json=keep.as_json):  # a server that does not answer: 3
            gone = missing_store(db, ENFORCER_TABLE)
        if gone is not None:  # never made here: `removed 0` from a store just created said nothing true
            fail(f"--db: {gone}; nothing was created (enforcer serve makes the store)", as_json=keep.as_json)

        async def go() -> dict[str, Any]:
            await store.open()
            try:
                report = await compact_enforcer(store, older_than=keep.seconds, now=time.time())
            finally:
                await store.close()
            return report.to_json()

        doc = _run(go)
        finish(keep.as_json, ran("enforcer compact") | doc,
               [f"removed {doc['sends']} sends, {doc['outcomes']} outcomes, {doc['counters']} counters,"
                f" {doc['claims']} claims, {doc['spend_counters']} spend counters;"
                f" compacted {doc['payments']} payments"])

    _register_agents(agent_app)
    register_spend(agent_app)
    _register_approvals(approvals_app)

    @app.command("mcp")
    def mcp() -> None:
        """MCP server (stdio) for an agent: send protocol messages, check inbox and status.
        Configured by $ENVELOPAY_ENFORCER, $ENVELOPAY_AGENT_TOKEN, $ENVELOPAY_AGENT_ADDRESS and
        optionally $ENVELOPAY_AGENT_MAILDIR."""
        # lazy: keeps httpx off this module's import
        from envelopay.enforcer.client.mcp_server import config_from_env, run_stdio

        with answers():  # the environment configures it: a ConfigError is exit 3
            config = config_from_env(os.environ)
        run_stdio(config)


def _register_agents(agent_app: typer.Typer) -> None:
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
        _listing(where, "agent list", "agents", rows, nxt,
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


def _listing(where: OperatorOptions, command: str, key: str, rows: list[dict[str, Any]], nxt: str | None,
             empty: str, line: Callable[[dict[str, Any]], str]) -> None:
    """One page of a list: its document, or its lines and how to get the next page."""
    if not where.as_json:
        next_page(nxt, f"envelopay {command}")
    finish(where.as_json, ran(command) | {key: rows, "next": nxt}, [line(r) for r in rows] or [empty])


def _approval_line(r: dict[str, Any]) -> str:
    what = r["subject"] or (r["type"] or "").upper()
    return f"{r['id']}  {r['state']:<8} {r['agent']} → {r['to']}: {what}  ({r['reason']})"


_DECISIONS = {
    "approve": "Approve a pending send and deliver it.",
    "reject": "Reject a pending send.",
    "retry": "Re-execute an approved send stranded by a crash (after the grace period).",
}


def _register_approvals(approvals_app: typer.Typer) -> None:
    @approvals_app.command("list")
    @OPERATOR
    def approvals_list(where: OperatorOptions, limit: LimitOpt = 100, after: AfterOpt = None) -> None:
        """The approval queue, pending first, one page."""
        rows, nxt = ask(where, lambda op: op.approvals_page(limit, after))
        _listing(where, "approvals list", "approvals", rows, nxt, "approval queue is empty", _approval_line)

    @approvals_app.command("show")
    @OPERATOR
    def approvals_show(
        where: OperatorOptions, approval_id: Annotated[str, typer.Argument(metavar="ID")]
    ) -> None:
        """One approval, exactly as it would leave: a mail's from, to, subject, body,
        attachments and thread; a payment's amount, payee, wallet, invoice, the agent's
        balance (and shortfall) and spend policy with today's remaining caps; and the
        content hash that `approvals approve ID --hash` binds the decision to."""
        view = ask(where, lambda op: op.approval(approval_id))
        if view is None:
            fail(f"ID: no approval {approval_id}")
        finish(where.as_json, ran("approvals show", approval=view), approval_lines(view))

    for action, doc in _DECISIONS.items():
        approvals_app.command(action)(OPERATOR(_decision(action, doc)))


HashOpt = Annotated[str | None, typer.Option(
    "--hash", metavar="SHA256",
    help="The content_hash `approvals show` printed: refused (exit 1, conflict) if the approval "
    "changed since.",
)]


def _decision_lines(send_id: str, data: dict[str, Any]) -> list[str]:
    """The outcome, then (apart) why it had been held: `SENT (recipient not on the
    allowlist)` read as if that were why it was sent. A sent approval's detail is the
    reason it was held; any other state's is its own (why it failed)."""
    state, detail = data["state"], data.get("detail") or ""
    if state != "SENT":
        return [f"{send_id}: {state}" + (f": {detail}" if detail else "")]
    return [f"{send_id}: SENT (approved; it left)", *([f"  it had been held: {detail}"] if detail else [])]


def _decision(action: str, doc: str) -> Callable[..., None]:
    def decide(where: OperatorOptions, send_id: Annotated[str, typer.Argument()], content_hash: HashOpt = None
               ) -> None:
        status, data = ask(where, lambda op: op.decide(send_id, action, content_hash))
        detail = f" ({data['detail']})" if data.get("detail") else ""
        if status == 404:
            fail(f"SEND_ID: no approval {send_id}")
        if status == 409:
            fail(f"conflict: the approval is {data['state']}{detail}", code=FAILED, error="conflict")
        code = decision_exit(action, data)
        disposition = data.get("disposition") or {}
        finish(where.as_json, ran(f"approvals {action}", code, id=send_id, state=data["state"],
                                     detail=data.get("detail", ""), delivered=data["state"] == "SENT",
                                     disposition=disposition or None),
               _decision_lines(send_id, data))

    decide.__doc__ = doc
    decide.__name__ = action
    return decide
