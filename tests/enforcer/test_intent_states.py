"""The enforcer's state machines are tables (enforcer/common/state_table.py): the payment
intent's (intent_states.py) and the send request's (send_states.py). SPEC.md's diagrams are
drawn from them, and the stores' conditional UPDATEs implement exactly their moves on both
stores — from every state a table allows, and from no other."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from envelopay.enforcer.common.state_table import START
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.model import QueueState, SendRequest
from envelopay.enforcer.send.states import SENDS, SendMove
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.intent import IN_FLIGHT, INTENT_STATES, Intent
from envelopay.enforcer.spend.states import DRIVEN, INTENTS, Move
from envelopay.enforcer.spend.store import PaymentStore

from .paykit import make_kit, pay_req, payee_wallet

SPEC = (Path(__file__).resolve().parents[2] / "SPEC.md").read_text()
SEND_STATES: tuple[QueueState, ...] = ("PENDING", "APPROVED", "REJECTED", "SENT", "FAILED")

# Each move the store makes, as the executor calls it.
INTENT_MOVES: dict[Move, Callable[[PaymentStore, Intent], Awaitable[bool]]] = {
    Move.APPROVE: lambda s, i: s.approve(i.id, "op", 1.0),
    Move.REJECT: lambda s, i: s.reject(i.id, "op", "no", 1.0),
    Move.CLAIM: lambda s, i: s.claim(i.id, 1.0),
    Move.SIGN_BROADCAST: lambda s, i: s.mark_signed_broadcast(i.id, f"tx-{i.id}", b"\x01", 1.0),
    Move.SIGN: lambda s, i: s.mark_signed(i.id, f"tx-{i.id}", b"\x01", 1.0),
    Move.BROADCAST: lambda s, i: s.mark_broadcast(i.id, 1.0),
    Move.CONFIRM: lambda s, i: s.mark_paid(i.id, 1.0),
    Move.DELIVER: lambda s, i: s.mark_sent(i.id, "", 1.0),
    Move.FAIL: lambda s, i: s.fail(i.id, i.state, "x", "x", 1.0),
}
SEND_MOVES: dict[SendMove, Callable[[EnforcerStore, str], Awaitable[bool]]] = {
    SendMove.APPROVE: lambda s, sid: s.approve(sid, "op", 1.0),
    SendMove.REJECT: lambda s, sid: s.reject(sid, "op", "no", 1.0),
    SendMove.RECLAIM: lambda s, sid: s.reclaim(sid, 100.0, 50.0),
    SendMove.DELIVER: lambda s, sid: s.finish(sid, "SENT", "<m@x>", "", 1.0),
    SendMove.FAIL: lambda s, sid: s.finish(sid, "FAILED", None, "x", 1.0),
}


def test_spec_draws_the_tables() -> None:
    assert INTENTS.render_mermaid() in SPEC
    assert SENDS.render_mermaid() in SPEC


def test_the_tables_cover_every_state() -> None:
    assert INTENTS.states() == set(INTENT_STATES)
    assert SENDS.states() == set(SEND_STATES)
    assert set(DRIVEN) <= set(IN_FLIGHT)
    # FAILED only where no money moved or none can move: never from PAID, SENT or a decision.
    assert set(INTENTS.sources(Move.FAIL)) == {"APPROVED", "RESERVED", "SIGNED", "BROADCAST"}
    for table, final in ((INTENTS, ("SENT", "FAILED", "REJECTED")), (SENDS, ("SENT", "FAILED", "REJECTED"))):
        assert not [r for r in table.rows if r.state in final]  # no way out of a final state
    # Every move the stores make (not the calls that make rows) is exercised below.
    assert {r.move for r in INTENTS.rows if r.state != START} == set(INTENT_MOVES)
    assert {r.move for r in SENDS.rows if r.state != START} == set(SEND_MOVES)


@pytest.mark.parametrize("move", list(INTENT_MOVES))
async def test_the_payment_store_makes_exactly_the_tables_moves(enforcer: Enforcer, move: Move) -> None:
    kit = await make_kit(enforcer)
    token, _ = await kit.agent(payees=())  # every payment held: one PENDING intent to copy
    held = await kit.payments.submit("pay", token, pay_req(payee_wallet(), key="seed"))
    assert held.id is not None
    seed = await kit.payments.store.get(held.id)
    assert seed is not None
    for state in INTENT_STATES:
        new_id = uuid.uuid4().hex
        intent = replace(seed, id=new_id, idem_key=new_id, state=state, tx_id=None, tx_blob=None)
        if state in ("SIGNED", "BROADCAST", "PAID", "SENT"):
            intent = replace(intent, tx_id=f"tx-{new_id}", tx_blob=b"\x01")
        assert await kit.payments.store.insert_intent(intent, 1.0)
        moved = await INTENT_MOVES[move](kit.payments.store, intent)
        after = await kit.payments.store.get(new_id)
        assert after is not None
        expected = INTENTS.target(state, move)
        assert moved == (expected is not None), (move, state)
        assert after.state == (expected or state), (move, state)


@pytest.mark.parametrize("move", list(SEND_MOVES))
async def test_the_send_store_makes_exactly_the_tables_moves(enforcer: Enforcer, move: SendMove) -> None:
    agent, _ = await enforcer.create_agent("s1", "s1@agents.test")
    store = enforcer.store
    req = SendRequest(to="b@partner.test", sender="s1@agents.test", text="hi", subject="hi")
    for state in SEND_STATES:
        sid = uuid.uuid4().hex
        made: QueueState = "PENDING" if state == "APPROVED" else state
        step = store.send_step(id=sid, agent_id=agent.id, state=made, reason="", request=req,
                               fingerprint=sid, message_id=None, now=1.0)
        await store.transaction([step])
        if state == "APPROVED":  # as every APPROVED row is made: decided, with its time
            assert await store.approve(sid, "op", 1.0)
        moved = await SEND_MOVES[move](store, sid)
        after = await store.get_send(sid)
        assert after is not None
        expected = SENDS.target(state, move)
        assert moved == (expected is not None), (move, state)
        assert after.state == (expected or state), (move, state)
