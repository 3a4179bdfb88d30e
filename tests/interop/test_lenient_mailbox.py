"""`profile = "lenient"` in the worker config: the mailbox parses with the interop
profile, and each leniency applied is listed in the Outcome (and its recorded JSON)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tests.interop import _kimjune01 as them

from envelopay.config import config_from_dict
from envelopay.engine import Outcome
from envelopay.errors import ConfigError
from envelopay.node.agent_node import AgentNode, build_node
from envelopay.protocol.compose import compose
from envelopay.protocol.messages import Invoice
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp


def node(tmp_path: Path, profile: str | None) -> AgentNode:
    agent = {"address": k.WORKER, "domain": "garden.test", "ledger": str(tmp_path / f"{profile}.db")}
    if profile is not None:
        agent["profile"] = profile
    # The garden socket is never reached: these tests hand mail to the engine directly.
    transport = {"kind": "garden", "garden_socket": str(tmp_path / "garden.sock")}
    cfg = config_from_dict({"agent": agent, "transport": transport}, base_dir=tmp_path)
    rail = k.DictRail()
    rail.txs["tx_l1"] = k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE)
    return build_node(cfg, app=WorkerApp(rail), rails={k.CHAIN: rail}, clock=k.Clock())


async def _order_then_their_pay(n: AgentNode, *, in_our_thread: bool = True) -> tuple[Outcome, Outcome]:
    body = {"v": "0.1.0", "type": "order", "id": "ord_l1", "task": {"op": "echo"}}
    first = await n.engine.handle(them.request(k.WORKER, "ORDER | echo", body))
    row = n.store.outbox_get(first.outbox[0]) if first.outbox else None
    assert row is not None and isinstance(row.outbound.message, Invoice)
    invoice = compose(row.outbound)
    pay = {"v": "0.1.0", "type": "pay", "id": "pay_l1", "amount": str(k.PRICE), "token": k.TOKEN,
           "chain": k.CHAIN, "proof": {"tx": "tx_l1"}, "invoice_ref": row.outbound.message.id}  # fmt: skip
    parent = them.receive(invoice)
    if not in_our_thread:  # the same reply, threaded under a message we never sent
        parent = replace(parent, message_id="<elsewhere@agentmail.test>", references=())
    their_pay = them.reply(parent, "axiomatic@agentmail.test", "PAY | paid", pay)
    return first, await n.engine.handle(their_pay)


async def test_a_lenient_mailbox_reads_the_reply_and_lists_the_leniency(tmp_path: Path) -> None:
    n = node(tmp_path, "lenient")
    try:
        first, second = await _order_then_their_pay(n)
        assert first.lenient == ()  # a plain ORDER needs no leniency
        assert (second.status, second.state) == ("processed", "fulfilled")
        assert second.lenient == ("lenient: Re: subject read as PAY from the body's first line",)
        assert second.to_json()["lenient"] == list(second.lenient)
    finally:
        await n.close()
        n.store.close()


async def test_a_strict_mailbox_reads_a_reply_in_its_thread_with_no_leniency(tmp_path: Path) -> None:
    # SPEC "Replies in our thread": a Re: naming our INVOICE is read by its JSON under
    # strict too, so nothing lenient was applied.
    n = node(tmp_path, None)
    try:
        _, second = await _order_then_their_pay(n)
        assert (second.status, second.state, second.lenient) == ("processed", "fulfilled", ())
    finally:
        await n.close()
        n.store.close()


async def test_a_strict_mailbox_leaves_a_reply_outside_its_threads_alone(tmp_path: Path) -> None:
    n = node(tmp_path, None)
    try:
        _, second = await _order_then_their_pay(n, in_our_thread=False)
        assert (second.status, second.lenient) == ("ignored", ())
    finally:
        await n.close()
        n.store.close()


def test_an_unknown_profile_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        node(tmp_path, "loose")
