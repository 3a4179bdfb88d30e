"""What the CLI's client commands do below the front end.

A command builds its message here (validated before any I/O), picks the action that
sends it (paying first where the protocol says so), and `run` does the rest: build the
node from the config, act, note whether the mail left or waits in the outbox, and follow
the flow for the answer. `call_endpoint` calls a tool endpoint; what the reading commands
read from the ledger is in client/ledger_reads.py (re-exported here, the CLI's one door).
Every refusal is a UsageError or ConfigError naming the option, raised before anything is
paid or sent.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.client.buyer import (
    Answer,
    ClientApp,
    build,
    check_address,
    follow,
    judge,
    parse_json_option,
    pay_first,
)
from envelopay.client.ledger_reads import (
    config_decimals,
    flow_of_ref,
    flow_thread,
    flows,
    fulfill_flow,
    job_states,
    oops_flow,
    outbox,
)
from envelopay.client.preflight import (
    PayTerms,
    accepts_pair,
    check_timeout,
    exchange_query,
    fresh_methods,
    invoice_terms,
    oops_code,
)
from envelopay.client.report import client_report
from envelopay.config import WorkerConfig
from envelopay.endpoints.calls import CallClient, LedgerCalls
from envelopay.errors import Refused, UsageError
from envelopay.mail.maildir import Pickup, mailbox_path
from envelopay.node.agent_node import build_node, config_signer, garden_transport, open_store
from envelopay.node.runtime import serve_call_replies
from envelopay.protocol.messages import Invoice, MessageType, Which, model_for

if TYPE_CHECKING:
    from envelopay.client.report import Report
    from envelopay.endpoints.calls import CallResult
    from envelopay.engine import Sent
    from envelopay.engine.outbox import DrainReport
    from envelopay.node.agent_node import AgentNode
    from envelopay.protocol.messages import Accept, Invoice, Message, Offer, Pay

__all__ = [
    "Act",
    "ClientRun",
    "PayTerms",
    "accept",
    "billing_wallet",
    "call_endpoint",
    "call_request",
    "check_address",
    "check_timeout",
    "config_decimals",
    "draft",
    "drain",
    "execute",
    "flow_of_ref",
    "flow_thread",
    "flows",
    "fulfill_flow",
    "invoice",
    "job_states",
    "judge",
    "max_amount_option",
    "new_id",
    "offer",
    "oops_code",
    "oops_flow",
    "outbox",
    "parse_json_option",
    "pay",
    "pay_terms",
    "pay_the_invoice",
    "return_wallet",
    "run",
    "send",
    "take_in",
]

Act = Callable[["AgentNode"], Awaitable["Sent"]]


def new_id(prefix: str, given: str | None) -> str:
    """The protocol id given, else a fresh `PREFIX_hex`."""
    return given or f"{prefix}_{secrets.token_hex(5)}"


def draft(kind: str, **fields: Any) -> Any:
    """A validated message of type `kind` (its model, e.g. Pay for "pay"); a bad field →
    UsageError naming its option."""
    return build(model_for(MessageType(kind)), **fields)  # type: ignore[arg-type]


def billing_wallet(cfg: WorkerConfig, chain: str, token: str, given: str | None) -> str:
    """Where an INVOICE asks to be paid: --wallet, else our configured wallet for the asset."""
    wallet = given or next((a.wallet for a in cfg.accept if a.chain == chain and a.token == token), None)
    if wallet is None:
        raise UsageError(f"--wallet: no configured wallet for {chain}/{token}; give --wallet")
    return wallet


def return_wallet(cfg: WorkerConfig, chain: str, given: str | None) -> str | None:
    """Where an OFFER's wanted asset comes back: --wallet, else our wallet on that chain."""
    return given or next((a.wallet for a in cfg.accept if a.chain == chain), None)


def send(message: Message, to: str, flow: str | None = None) -> Act:
    """Send `message` as it is."""
    return lambda node: node.send(message, to, flow_id=flow)


def invoice(message: Invoice, to: str, flow: str | None = None) -> Act:
    """Send an INVOICE whose chain, token, amount and wallet our rails judged first: one
    they could not verify a PAY for (an EVM wallet on Solana, `0xzz`, an unknown token)
    never goes out as a valid INVOICE."""

    async def act(node: AgentNode) -> Sent:
        judge(node.rails, chain=message.chain, token=message.token, amount=message.amount,
              wallet=message.wallet)
        return await node.send(message, to, flow_id=flow)

    return act


def pay(message: Pay, to: str, *, wallet: str | None, invoice: str | None, flow: str | None,
        made: dict[str, Any] | None = None) -> Act:
    """Pay the INVOICE's (or the given) wallet on the rail, then send PAY with the proof.
    `made` (`--proof`): a transaction already made is the proof; nothing is paid."""

    async def act(node: AgentNode) -> Sent:
        recipient = wallet or _invoice_wallet(node, to, invoice)
        proof = await pay_first(node, chain=message.chain, token=message.token, amount=message.amount,
                                recipient=recipient, made=made)
        return await node.send(message.model_copy(update={"proof": proof}), to, flow_id=flow)

    return act


def offer(
    message: Offer, to: str, *, check: bool = True, timeout: float = 60.0,
    progress: Callable[[str], None] = lambda _: None, checked: dict[str, Any] | None = None,
) -> Act:
    """Learn that `to` takes the pair (a fresh METHODS on record, else a WHICH now), then
    pay the give leg and send the OFFER with its proof. `check` False skips the first
    step (--no-check); `checked` receives what the check found."""

    async def act(node: AgentNode) -> Sent:
        g, w = message.give, message.want
        # Both legs judged before the WHICH of the check: an unknown asset mailed the peer.
        judge(node.rails, chain=g.chain, token=g.token, amount=g.amount, wallet=g.to, prefix="give-",
              wallet_option="give-to")
        judge(node.rails, chain=w.chain, token=w.token, amount=w.amount, wallet=message.wallet,
              prefix="want-")
        if check:
            found = await _learn_pair(node, to, message, timeout, progress)
            if checked is not None:
                checked.update(found)
        proof = await pay_first(node, chain=g.chain, token=g.token, amount=g.amount, recipient=g.to,
                                prefix="give-", wallet_option="give-to")
        give = g.model_copy(update={"proof": proof})
        return await node.send(message.model_copy(update={"give": give}), to)

    return act


def accept(message: Accept, to: str, *, wallet: str | None, offer_ref: str, flow: str | None) -> Act:
    """Take in waiting mail (the OFFER), pay the counter-asset to the OFFER's (or the given)
    wallet, then send ACCEPT."""

    async def act(node: AgentNode) -> Sent:
        # The OFFER may have arrived since our last command: take in what waits first. Only
        # here: other commands run beside a served worker too (an operator's FULFILL), and
        # this process must not answer that worker's mail in its stead.
        judge(node.rails, chain=message.chain, token=message.token, amount=message.amount, wallet=wallet)
        await take_in(node)
        if flow is None and node.store.flow_for_ref(node.address, to, to, offer_ref) is None:
            # The ACCEPT could join no flow: refused here, not after the money moved.
            raise UsageError(f"--offer: no OFFER {offer_ref!r} from {to} in this ledger; nothing was paid")
        recipient = wallet or _offer_wallet(node, to, offer_ref)
        proof = await pay_first(node, chain=message.chain, token=message.token, amount=message.amount,
                                recipient=recipient)
        return await node.send(message.model_copy(update={"proof": proof}), to, flow_id=flow)

    return act


async def _learn_pair(
    node: AgentNode, to: str, message: Offer, timeout: float, progress: Callable[[str], None]
) -> dict[str, Any]:
    """What `to` said about the pair: its METHODS on record, or its answer to a WHICH
    sent now. Not taken (or no answer) → Refused; a different give wallet → UsageError."""
    g, w = message.give, message.want
    give, want = f"{g.chain}/{g.token}", f"{w.chain}/{w.token}"
    rec = fresh_methods(node.store, node.address, to, give, want)
    source = "on record"
    methods: Any = rec.data.get("methods") if rec is not None else None
    flow = rec.flow_id if rec is not None else None
    if rec is None:
        which = Which(id=new_id("wch", None), task=exchange_query(give, want))
        sent = await node.send(which, to)
        flow, source = sent.flow_id, "asked now"
        progress(f"asking {to} whether it takes {give} for {want} (WHICH {sent.message_id})")
        answer = await follow(node, sent, timeout=timeout, progress=progress)
        methods = answer.message.model_dump(mode="json") if answer.message is not None else None
        if answer.timed_out:
            raise Refused(f"{to} did not say within {timeout:g} s whether it takes {give} for {want}; "
                          "nothing was paid (--no-check offers anyway)")
    rail = accepts_pair(methods, give, want)
    if rail is None:
        said = (methods or {}).get("note") if isinstance(methods, dict) else None
        raise Refused(f"{to} has not said it takes {give} for {want} (its METHODS: {said!r}); "
                      "nothing was paid (--no-check offers anyway)")
    if str(rail.get("wallet")) != g.to:
        raise UsageError(f"--give-to: {to} takes {give} into wallet {rail.get('wallet')}, not {g.to}")
    return {"source": source, "flow": flow, "note": methods.get("note"), "wallet": rail.get("wallet")}


def _invoice_wallet(node: AgentNode, peer: str, invoice: str | None) -> str:
    if invoice is None:
        raise UsageError("--wallet: give the recipient wallet, or --invoice to pay an INVOICE we received")
    return _their_wallet(node, peer, invoice, "invoice")


def _offer_wallet(node: AgentNode, peer: str, offer_id: str) -> str:
    return _their_wallet(node, peer, offer_id, "offer")


def _their_wallet(node: AgentNode, peer: str, ref: str, kind: str) -> str:
    """The wallet named in the INVOICE or OFFER `ref` that `peer` sent us."""
    rec = node.store.flow_for_ref(node.address, peer, peer, ref)
    body = rec.data.get(kind) if rec is not None else None
    if not isinstance(body, dict) or not body.get("wallet"):
        raise UsageError(f"--{kind}: no {kind.upper()} {ref!r} from {peer} in this ledger; give --wallet")
    return str(body["wallet"])


Then = Callable[["AgentNode", Answer], Awaitable["Sent | None"]]


def max_amount_option(value: str | None) -> int | None:
    """`--max-amount`: digits in the asset's smallest unit, or absent."""
    # At most 78 digits: 2**256, the largest token amount, has 78 (5,000 digits were a
    # ValueError traceback from int()).
    if value is not None and not (value.isascii() and value.isdigit() and len(value) <= 78):
        raise UsageError("--max-amount: at most 78 digits, in the asset's smallest unit")
    return int(value) if value is not None else None


def pay_the_invoice(to: str, max_amount: int | None) -> Then:
    """`order --pay`: the INVOICE that answers our ORDER is paid (on its rail, to its
    wallet, waiting until our transaction is final) and the PAY sent in the same flow.
    More than `max_amount` → UsageError, nothing paid. Any other answer: nothing to do."""

    async def then(node: AgentNode, answer: Answer) -> Sent | None:
        invoice = answer.message
        if not isinstance(invoice, Invoice) or answer.outcome is None or answer.outcome.flow_id is None:
            return None
        if max_amount is not None and invoice.amount > max_amount:
            raise UsageError(f"--max-amount: the INVOICE asks {invoice.amount}, more than {max_amount}; "
                             "nothing was paid")
        proof = await pay_first(node, chain=invoice.chain, token=invoice.token, amount=invoice.amount,
                                recipient=invoice.wallet)
        pay_msg = draft("pay", id=new_id("pay", None), amount=invoice.amount, token=invoice.token,
                        chain=invoice.chain, proof=proof, invoice_ref=invoice.id)
        return await node.send(pay_msg, to, flow_id=answer.outcome.flow_id)

    return then


async def take_in(node: AgentNode) -> int:
    """Handle the mail already waiting in our Maildir (what arrived since the last command,
    e.g. the OFFER to accept), oldest first. Returns how many;
    a message another process holds (busy) or whose DKIM key lookup failed for now
    (deferred) stays in new/."""
    if node.maildir is None:
        return 0
    handled = 0
    async with Pickup([node.maildir], use_inotify=False) as pickup:
        while True:
            try:
                delivery = await pickup.next(timeout=0)
            except TimeoutError:
                break
            try:
                outcome = await node.receive(delivery.raw)
            except Exception:  # a bug, never the sender's input: filed flagged, as the pump does
                logging.getLogger("envelopay.client").exception("could not take in %s", delivery.path)
                pickup.done(delivery, flags="F")
                continue
            if outcome.status not in ("busy", "deferred"):
                pickup.done(delivery, flags="S")
                handled += 1
    return handled


@dataclass(frozen=True)
class ClientRun:
    """What one client command did: the message sent, whether it still waits in the
    outbox (`queued` says why), and the answer when it was followed."""

    kind: str
    sent: Sent
    queued: str | None = None
    answer: Answer | None = None
    failed: bool = False  # the transport refused it for good (e.g. 550): no retry
    paid_to: str | None = None  # the wallet a follow-up PAY paid (order --pay: the INVOICE's)


def run(
    cfg: WorkerConfig,
    act: Act,
    *,
    wait: bool,
    timeout: float,
    on_sent: Callable[[ClientRun], None] = lambda _: None,
    progress: Callable[[str], None] = lambda _: None,
    then: Then | None = None,
) -> ClientRun:
    """Build the node, act (validate → pay → send), and with `wait` follow the flow;
    `then` may answer the answer (e.g. pay the INVOICE), which is followed in turn."""
    wallets = {(a.chain, a.token): a.wallet for a in cfg.accept}

    async def main() -> ClientRun:
        node = build_node(cfg, app=ClientApp(wallets))
        try:
            sent = await act(node)
            row = node.store.outbox_get(sent.message_id)
            done = ClientRun(sent.outbound.message.type.upper(), sent)
            if row is not None and row.status != "sent":
                # Recorded in its flow and the outbox; a later drain delivers it (same bytes).
                return ClientRun(done.kind, sent, queued=row.last_error or row.status,
                                 failed=row.status == "failed")
            on_sent(done)
            if not wait:
                return done
            answer = await follow(node, sent, timeout=timeout, progress=progress)
            if then is not None and answer.message is not None:
                progress(f"received {answer.message.type.upper()} (flow {sent.flow_id})")
                follow_up = await then(node, answer)
                if follow_up is not None:
                    paid_to = getattr(answer.message, "wallet", None)  # the INVOICE we paid
                    done = ClientRun(follow_up.outbound.message.type.upper(), follow_up, paid_to=paid_to)
                    on_sent(done)
                    answer = await follow(node, follow_up, timeout=timeout, progress=progress)
                    return ClientRun(done.kind, follow_up, answer=answer, paid_to=paid_to)
            return ClientRun(done.kind, sent, answer=answer)
        finally:
            await node.close()
            node.store.close()

    return asyncio.run(main())


def execute(
    command: str, cfg: WorkerConfig, act: Act, *, wait: bool, timeout: float,
    progress: Callable[[str], None] = lambda _: None, overrides: tuple[str, ...] = (),
    recipient: str | None = None, checked: dict[str, Any] | None = None, then: Then | None = None,
    told: Callable[[Report], None] = lambda _: None,
) -> Report:
    """Run one client command and classify it (client.report): document, exit code, lines.
    `told` gets the report of each message as it leaves (its lines so far: sent, paid),
    before any answer or WAIT about it comes in."""
    if wait:
        check_timeout(timeout)
    decimals = config_decimals(cfg)  # before the run: `told` is called inside its event loop

    def report(done: ClientRun) -> Report:
        return client_report(command, done, timeout=timeout, overrides=overrides,
                             recipient=recipient or done.paid_to, checked=checked or None, decimals=decimals)

    done = run(cfg, act, wait=wait, timeout=timeout, progress=progress, then=then,
               on_sent=lambda sent: told(report(sent)))
    return report(done)


def call_request(request: str) -> dict[str, Any]:
    """--request: one JSON object."""
    payload = parse_json_option(request, "--request")
    if not isinstance(payload, dict):
        raise UsageError("--request: must be one JSON object")
    return payload


def call_endpoint(cfg: WorkerConfig, to: str, payload: dict[str, Any], timeout: float) -> CallResult:
    """Send one tool call over the garden and wait for its reply (or `timeout`)."""
    async def main() -> CallResult:
        store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
        transport = garden_transport(cfg)
        sign = config_signer(cfg)

        async def send(raw: bytes, sender: str, recipient: str) -> None:
            await transport.send(sign(raw) if sign is not None else raw, sender, recipient)

        client = CallClient(LedgerCalls(store, local=cfg.agent.address), address=cfg.agent.address,
                            domain=cfg.agent.domain, send=send)
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

    return asyncio.run(main())


def drain(cfg: WorkerConfig) -> DrainReport:
    """Send what the outbox holds now (same bytes as first composed; at-least-once)."""
    wallets = {(a.chain, a.token): a.wallet for a in cfg.accept}

    async def main() -> DrainReport:
        node = build_node(cfg, app=ClientApp(wallets))
        try:
            # An explicit drain is the user asking for delivery now: rows backing off
            # after a failed attempt go too (same bytes; at-least-once as ever).
            node.store.outbox_expedite()
            return await node.drain()
        finally:
            await node.close()
            node.store.close()

    return asyncio.run(main())


def pay_terms(
    cfg: WorkerConfig, to: str, invoice: str | None, *, amount: str | None, token: str | None,
    chain: str | None, wallet: str | None, override: bool,
) -> PayTerms:
    """What `pay` pays: the INVOICE's terms (client.preflight), or the flags when no INVOICE."""
    if invoice is not None:
        return invoice_terms(cfg, to, invoice, amount=amount, token=token, chain=chain, wallet=wallet,
                             override=override)
    for name, value in (("amount", amount), ("token", token), ("chain", chain)):
        if value is None:
            raise UsageError(f"--{name}: required unless --invoice names the INVOICE to pay")
    assert amount is not None and token is not None and chain is not None
    return PayTerms(amount, token, chain, wallet)
