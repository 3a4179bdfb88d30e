"""What the CLI's client commands do below the front end.

A command builds its message here (validated before any I/O), picks the action that
sends it (paying first where the protocol says so), and `run` does the rest: build the
node from the config, act, note whether the mail left or waits in the outbox, and follow
the flow for the answer. `flows`, `flow_thread` and `call_endpoint` read the ledger or
call a tool endpoint. Every refusal is a UsageError or ConfigError naming the option,
raised before anything is paid or sent.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envelopay.client.buyer import (
    Answer,
    ClientApp,
    build,
    check_address,
    follow,
    parse_json_option,
    pay_first,
)
from envelopay.config import WorkerConfig
from envelopay.errors import UsageError

if TYPE_CHECKING:
    from envelopay.endpoints.calls import CallResult
    from envelopay.engine import Sent
    from envelopay.ledger.store import FlowRecord, LogEntry
    from envelopay.node.wiring import AgentNode
    from envelopay.protocol.messages import Accept, Message, Offer, Pay

__all__ = [
    "Act",
    "ClientRun",
    "accept",
    "billing_wallet",
    "call_endpoint",
    "call_request",
    "check_address",
    "draft",
    "flow_thread",
    "flows",
    "new_id",
    "offer",
    "parse_json_option",
    "pay",
    "return_wallet",
    "run",
    "send",
]

Act = Callable[["AgentNode"], Awaitable["Sent"]]


def new_id(prefix: str, given: str | None) -> str:
    """The protocol id given, else a fresh `PREFIX_hex`."""
    return given or f"{prefix}_{secrets.token_hex(5)}"


def draft(kind: str, **fields: Any) -> Any:
    """A validated message of type `kind` (its model, e.g. Pay for "pay"); a bad field →
    UsageError naming its option."""
    from envelopay.protocol.messages import MessageType, model_for

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


def pay(message: Pay, to: str, *, wallet: str | None, invoice: str | None, flow: str | None) -> Act:
    """Pay the INVOICE's (or the given) wallet on the rail, then send PAY with the proof."""

    async def act(node: AgentNode) -> Sent:
        recipient = wallet or _invoice_wallet(node, to, invoice)
        proof = await pay_first(node, chain=message.chain, token=message.token, amount=message.amount,
                                recipient=recipient)
        return await node.send(message.model_copy(update={"proof": proof}), to, flow_id=flow)

    return act


def offer(message: Offer, to: str) -> Act:
    """Pay the give leg, then send the OFFER with its proof."""

    async def act(node: AgentNode) -> Sent:
        g = message.give
        proof = await pay_first(node, chain=g.chain, token=g.token, amount=g.amount, recipient=g.to)
        give = g.model_copy(update={"proof": proof})
        return await node.send(message.model_copy(update={"give": give}), to)

    return act


def accept(message: Accept, to: str, *, wallet: str | None, offer_ref: str, flow: str | None) -> Act:
    """Pay the counter-asset to the OFFER's (or the given) wallet, then send ACCEPT."""

    async def act(node: AgentNode) -> Sent:
        recipient = wallet or _offer_wallet(node, to, offer_ref)
        proof = await pay_first(node, chain=message.chain, token=message.token, amount=message.amount,
                                recipient=recipient)
        return await node.send(message.model_copy(update={"proof": proof}), to, flow_id=flow)

    return act


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


@dataclass(frozen=True)
class ClientRun:
    """What one client command did: the message sent, whether it still waits in the
    outbox (`queued` says why), and the answer when it was followed."""

    kind: str
    sent: Sent
    queued: str | None = None
    answer: Answer | None = None


def run(
    cfg: WorkerConfig,
    act: Act,
    *,
    wait: bool,
    timeout: float,
    on_sent: Callable[[ClientRun], None] = lambda _: None,
    progress: Callable[[str], None] = lambda _: None,
) -> ClientRun:
    """Build the node, act (validate → pay → send), and with `wait` follow the flow."""
    from envelopay.node.wiring import build_node

    wallets = {(a.chain, a.token): a.wallet for a in cfg.accept}

    async def main() -> ClientRun:
        node = build_node(cfg, app=ClientApp(wallets))
        try:
            sent = await act(node)
            row = node.store.outbox_get(sent.message_id)
            done = ClientRun(sent.outbound.message.type.upper(), sent)
            if row is not None and row.status != "sent":
                # Recorded in its flow and the outbox; a later drain delivers it (same bytes).
                return ClientRun(done.kind, sent, queued=row.last_error or row.status)
            on_sent(done)
            if not wait:
                return done
            answer = await follow(node, sent, timeout=timeout, progress=progress)
            return ClientRun(done.kind, sent, answer=answer)
        finally:
            await node.close()
            node.store.close()

    return asyncio.run(main())


def flows(cfg: WorkerConfig, limit: int, after: str | None = None) -> tuple[list[FlowRecord], str | None]:
    """One page of this agent's flows, most recently updated first, and the token of the
    next page (None: the last). A token is `updated_at|flow_id` of a page's last flow."""
    from envelopay.node.wiring import open_store

    before = None
    if after is not None:
        stamp, _, flow_id = after.partition("|")
        try:
            before = (datetime.fromisoformat(stamp), flow_id)
        except ValueError as exc:
            raise UsageError(f"not a flows page token: {after!r}") from exc
        if not flow_id or before[0].tzinfo is None:
            raise UsageError(f"not a flows page token: {after!r}")
    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        rows = store.list_flows(cfg.agent.address, limit + 1, before=before)
    finally:
        store.close()
    last = rows[limit - 1] if len(rows) > limit else None
    return rows[:limit], (f"{last.updated_at.isoformat()}|{last.flow_id}" if last else None)


def flow_thread(cfg: WorkerConfig, flow_id: str) -> tuple[FlowRecord, list[LogEntry]]:
    """One flow and its log; an unknown flow → UsageError."""
    from envelopay.node.wiring import open_store

    store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
    try:
        rec = store.get_flow(flow_id)
        log = store.flow_log(flow_id) if rec is not None else []
    finally:
        store.close()
    if rec is None:
        raise UsageError(f"FLOW: no flow {flow_id!r} in {cfg.agent.ledger}")
    return rec, log


def call_request(request: str) -> dict[str, Any]:
    """--request: one JSON object."""
    payload = parse_json_option(request, "--request")
    if not isinstance(payload, dict):
        raise UsageError("--request: must be one JSON object")
    return payload


def call_endpoint(cfg: WorkerConfig, to: str, payload: dict[str, Any], timeout: float) -> CallResult:
    """Send one tool call over the garden and wait for its reply (or `timeout`)."""
    from envelopay.endpoints.calls import CallClient, LedgerCalls
    from envelopay.mail.maildir import mailbox_path
    from envelopay.node.runtime import serve_call_replies
    from envelopay.node.wiring import garden_transport, open_store

    async def main() -> CallResult:
        store = open_store(cfg.agent.ledger, Path(cfg.base_dir))
        transport = garden_transport(cfg)
        client = CallClient(LedgerCalls(store, local=cfg.agent.address), address=cfg.agent.address,
                            domain=cfg.agent.domain, send=transport.send)
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
