"""CLI commands of the client: the nine messages, flows, show, outbox, drain. Thin: each
parses options, calls envelopay.client, prints the report (README "Output and exit codes").
Bad input → a message naming the field and exit code 2, before anything is sent or paid.
The client's imports stay inside the commands: `envelopay --help` must not load the engine."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from envelopay.cli.options import CLIENT, LEDGER, AfterOpt, ClientOptions, LimitOpt
from envelopay.cli.output import answers, emit, next_page, table
from envelopay.client import views as v
from envelopay.errors import UsageError

if TYPE_CHECKING:
    from envelopay.client.commands import Act
    from envelopay.client.report import Report
    from envelopay.config import WorkerConfig

_Flow = Annotated[str | None, typer.Option("--flow", help="The flow this message belongs to.")]
_Note = Annotated[str | None, typer.Option("--note", help="Human-readable note.")]
_Id = Annotated[str | None, typer.Option("--id", help="Protocol id (default: generated).")]
_Amount = Annotated[str, typer.Option("--amount", help="Smallest units (digits).")]
_Token = Annotated[str, typer.Option("--token", help="Symbol or contract address.")]
_Chain = Annotated[str, typer.Option("--chain", help="e.g. solana-local, base-local.")]
_MaybeAmount = Annotated[str | None, typer.Option("--amount", help="Smallest units (default: INVOICE's).")]
_MaybeToken = Annotated[str | None, typer.Option("--token", help="Symbol (default: the INVOICE's).")]
_MaybeChain = Annotated[str | None, typer.Option("--chain", help="Chain (default: the INVOICE's).")]


def _load(o: ClientOptions) -> WorkerConfig:
    from envelopay.config import load_config  # lazy: the command's room loads when it runs, not at CLI start

    return load_config(o.config)


def _say(line: str) -> None:
    typer.echo(line, err=True)


def _client(command: str, o: ClientOptions, act: Act, **extra: Any) -> NoReturn:
    """Run one client action, print its report (JSON or lines), exit with its code."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    told: list[str] = []

    def sent_now(early: Report) -> None:
        # A message's lines (sent, paid) print as it leaves, so they come before the WAITs
        # and the answer about it that --wait prints: the lines follow the events.
        if not o.as_json:
            told[:] = early.lines
            for line in early.lines:
                typer.echo(line)

    with answers(as_json=o.as_json, transport_prefix="transport: "):
        rep = c.execute(command, _load(o), act, wait=o.wait, timeout=o.timeout, progress=_say, told=sent_now,
                        **extra)
    if o.as_json:
        emit(rep.document)
    else:
        said = len(told) if rep.lines[:len(told)] == tuple(told) else 0
        for line in rep.lines[said:]:
            typer.echo(line)
    raise typer.Exit(rep.code)


def _ask_with_task(kind: str, prefix: str, o: ClientOptions, address: str, task: str | None,
                   note: str | None, id: str | None, flow: str | None, then: Any = None) -> None:
    """WHICH or ORDER: a message carrying a task (JSON)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        msg = c.draft(kind, id=c.new_id(prefix, id), task=c.parse_json_option(task, "--task"), note=note)
        _client(kind, o, c.send(msg, to, flow), **({"then": then} if then is not None else {}))


@CLIENT
def which(o: ClientOptions, address: str,
          task: Annotated[str | None, typer.Option("--task", help="Task (JSON) to price.")] = None,
          note: _Note = None, id: _Id = None) -> None:
    """Ask ADDRESS what it accepts (WHICH → METHODS)."""
    _ask_with_task("which", "wch", o, address, task, note, id, None)


@CLIENT
def order(o: ClientOptions, address: str,
          task: Annotated[str, typer.Option("--task", help="Task (JSON): name + fields.")],
          note: _Note = None, id: _Id = None, flow: _Flow = None,
          pay: Annotated[bool, typer.Option("--pay", help="Pay the INVOICE that answers, then wait "
                                            "for FULFILL (implies --wait).")] = False,
          max_amount: Annotated[str | None, typer.Option("--max-amount", help="With --pay: the most "
                                                         "to pay (smallest units).")] = None) -> None:
    """Order work from ADDRESS (ORDER → INVOICE or FULFILL; with --pay → PAY → FULFILL)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    then = None
    if pay:
        with answers(as_json=o.as_json):
            then = c.pay_the_invoice(c.check_address(address), c.max_amount_option(max_amount))
        o = replace(o, wait=True)
    _ask_with_task("order", "ord", o, address, task, note, id, flow, then)


@CLIENT
def pay(o: ClientOptions, address: str,
        amount: _MaybeAmount = None, token: _MaybeToken = None, chain: _MaybeChain = None,
        to_wallet: Annotated[str | None, typer.Option("--wallet", help="Recipient wallet "
                                                      "(default: the invoice's).")] = None,
        invoice: Annotated[str | None, typer.Option("--invoice", help="INVOICE id this pays: its wallet, "
                                                    "amount, token and chain.")] = None,
        override: Annotated[bool, typer.Option("--override", help="Let the flags given win over "
                                               "the INVOICE's terms.")] = False,
        made: Annotated[str | None, typer.Option("--proof", help="Send the PAY for a transaction "
                                                 "already made (its proof, JSON, e.g. after a payment "
                                                 "that may still land); nothing is paid.")] = None,
        note: _Note = None, id: _Id = None, flow: _Flow = None) -> None:
    """Pay on the rail, then send PAY with the proof (PAY → FULFILL when it settles an INVOICE)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        proof = c.parse_json_option(made, "--proof")
        if proof is not None and not isinstance(proof, dict):
            raise UsageError("--proof: a JSON object, e.g. '{\"tx\": \"...\"}'; nothing was sent")
        to = c.check_address(address)
        terms = c.pay_terms(_load(o), to, invoice, amount=amount, token=token, chain=chain,
                            wallet=to_wallet, override=override)
        # Validate every field with a placeholder proof before any money moves.
        draft = c.draft("pay", id=c.new_id("pay", id), amount=terms.amount, token=terms.token,
                        chain=terms.chain, proof={"tx": "-"}, invoice_ref=invoice, note=note)
        _client("pay", o, c.pay(draft, to, wallet=terms.wallet, invoice=invoice, flow=flow, made=proof),
                overrides=terms.overrides, recipient=terms.wallet)


@CLIENT
def invoice_cmd(o: ClientOptions, address: str, amount: _Amount, token: _Token, chain: _Chain,
                wallet: Annotated[str | None, typer.Option("--wallet")] = None,
                order_ref: Annotated[str | None, typer.Option("--order", help="ORDER id.")] = None,
                due: Annotated[str | None, typer.Option("--due")] = None,
                note: _Note = None, id: _Id = None, flow: _Flow = None) -> None:
    """Bill ADDRESS (INVOICE → PAY)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        w = c.billing_wallet(_load(o), chain, token, wallet)
        msg = c.draft("invoice", id=c.new_id("inv", id), amount=amount, token=token, chain=chain,
                      wallet=w, order_ref=order_ref, due=due, note=note)
        _client("invoice", o, c.invoice(msg, to, flow))


@CLIENT
def offer(o: ClientOptions, address: str,
          give_amount: Annotated[str, typer.Option("--give-amount")],
          give_token: Annotated[str, typer.Option("--give-token")],
          give_chain: Annotated[str, typer.Option("--give-chain")],
          give_to: Annotated[str, typer.Option("--give-to", help="Their wallet for the give leg.")],
          want_amount: Annotated[str, typer.Option("--want-amount")],
          want_token: Annotated[str, typer.Option("--want-token")],
          want_chain: Annotated[str, typer.Option("--want-chain")],
          wallet: Annotated[str | None, typer.Option("--wallet", help="Ours, for the return.")] = None,
          no_check: Annotated[bool, typer.Option("--no-check", help="Pay without first learning that "
                                                 "ADDRESS takes the pair.")] = False,
          note: _Note = None, id: _Id = None) -> None:
    """Learn that ADDRESS takes the pair, pay the give leg, OFFER it (OFFER → ACCEPT)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        w = c.return_wallet(_load(o), want_chain, wallet)
        draft = c.draft("offer", id=c.new_id("ofr", id), wallet=w, note=note,
                        give={"amount": give_amount, "token": give_token, "chain": give_chain,
                              "to": give_to, "proof": {"tx": "-"}},
                        want={"amount": want_amount, "token": want_token, "chain": want_chain})
        checked: dict[str, Any] = {}
        timeout = c.check_timeout(o.timeout)
        _client("offer", o, c.offer(draft, to, check=not no_check, timeout=timeout, progress=_say,
                                    checked=checked), checked=checked)


@CLIENT
def accept(o: ClientOptions, address: str,
           offer_ref: Annotated[str, typer.Option("--offer", help="OFFER id.")],
           amount: _Amount, token: _Token, chain: _Chain,
           to_wallet: Annotated[str | None, typer.Option("--wallet", help="Default: OFFER's.")] = None,
           note: _Note = None, id: _Id = None, flow: _Flow = None) -> None:
    """Pay the counter-asset, then ACCEPT the OFFER with its proof."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        draft = c.draft("accept", id=c.new_id("acc", id), offer_ref=offer_ref, amount=amount,
                        token=token, chain=chain, proof={"tx": "-"}, note=note)
        _client("accept", o, c.accept(draft, to, wallet=to_wallet, offer_ref=offer_ref, flow=flow))


@CLIENT
def fulfill(o: ClientOptions, address: str,
            order_ref: Annotated[str, typer.Option("--order", help="ORDER id.")],
            result: Annotated[str, typer.Option("--result", help="Work product (JSON).")],
            note: _Note = None, id: _Id = None, flow: _Flow = None) -> None:
    """Deliver work for an ORDER (FULFILL)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        msg = c.draft("fulfill", id=c.new_id("ful", id), order_ref=order_ref,
                      result=c.parse_json_option(result, "--result"), note=note)
        _client("fulfill", o, c.send(msg, to, c.fulfill_flow(_load(o), to, flow, order_ref)))


@CLIENT
def oops(o: ClientOptions, address: str,
         code: Annotated[str, typer.Option("--code", help="An OOPS code of SPEC.md, e.g. tx_not_found.")],
         note: Annotated[str, typer.Option("--note", help="What went wrong, for a human.")],
         ref: Annotated[str | None, typer.Option("--ref", help="Id of the message concerned "
                                                 "(joins its flow).")] = None,
         id: _Id = None, flow: _Flow = None) -> None:
    """Tell ADDRESS something went wrong (OOPS), in the flow of --flow or of --ref."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        to = c.check_address(address)
        msg = c.draft("oops", id=c.new_id("oops", id), note=note, ref=ref,
                      error={"code": c.oops_code(code)})
        _client("oops", o, c.send(msg, to, c.oops_flow(_load(o), to, flow, ref)))


@LEDGER
def flows_cmd(o: ClientOptions, limit: LimitOpt = 50, after: AfterOpt = None) -> None:
    """This agent's flows (ids first, never cut) and their states, newest first, one page."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        cfg = _load(o)
        rows, nxt = c.flows(cfg, limit, after)
        jobs = c.job_states(cfg, [f.flow_id for f in rows])
    if o.as_json:
        emit(v.flows_doc(cfg.agent.address, rows, nxt, jobs))
        return
    table(v.FLOW_COLUMNS, v.flows_rows(rows, jobs), title=f"flows of {cfg.agent.address}", overflow=True,
          empty="no flows yet")
    next_page(nxt, f"envelopay flows --config {o.config}")


@LEDGER
def show(o: ClientOptions, flow: str) -> None:
    """Every message of one flow with each proof's verdict and OOPS, and where the money is."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        cfg = _load(o)
        rec, log = c.flow_thread(cfg, flow)
        job = c.job_states(cfg, [flow]).get(flow)
    if o.as_json:
        emit(v.show_doc(rec, log, job))
        return
    state = v.state_cell(rec.state, job)
    table(v.SHOW_COLUMNS, v.show_rows(log),
          title=f"{rec.flow_id}: {rec.kind} with {rec.peer}, {rec.side}, state {state}", overflow=True)
    if v.money_rows(rec):  # the rails' registries are read only for a flow that moved money
        money = v.money_rows(rec, c.config_decimals(_load(o)))
        table(v.MONEY_COLUMNS, money, title="payments in this flow", overflow=True)


@LEDGER
def outbox(o: ClientOptions) -> None:
    """The mail waiting in this agent's outbox (`envelopay drain` sends it)."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json):
        rows = c.outbox(_load(o))
    if o.as_json:
        emit(v.outbox_doc(rows))
        return
    table(v.OUTBOX_COLUMNS, v.outbox_rows(rows), title="outbox", overflow=True, empty="nothing queued")


@LEDGER
def drain(o: ClientOptions) -> None:
    """Send the mail the outbox holds now; exit 1 if some was refused for good, 3 if some waits."""
    from envelopay.client import commands as c  # lazy: keeps cryptography off this module's import

    with answers(as_json=o.as_json, transport_prefix="transport: "):
        doc = v.drain_doc(c.drain(_load(o)))
    if o.as_json:
        emit(doc)
    else:
        typer.echo(f"sent {len(doc['sent'])}, held for approval {len(doc['held'])}, "
                   f"to retry {len(doc['retry'])}, failed {len(doc['failed'])}")
    raise typer.Exit(doc["exit"])


def register(app: typer.Typer) -> None:
    """Add the client's commands to the top-level app."""
    app.command("which")(which)
    app.command("order")(order)
    app.command("pay")(pay)
    app.command("invoice")(invoice_cmd)
    app.command("offer")(offer)
    app.command("accept")(accept)
    app.command("fulfill")(fulfill)
    app.command("oops")(oops)
    app.command("flows")(flows_cmd)
    app.command("show")(show)
    app.command("outbox")(outbox)
    app.command("drain")(drain)
