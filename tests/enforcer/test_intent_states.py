"""The payment intent's state machine is one table (enforcer/intent_states.py): SPEC.md's
diagram is drawn from it, and the store's conditional UPDATEs implement exactly its moves
on both stores — from every state the table allows, and from no other."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import pytest

from envelopay.enforcer.core import Enforcer
from envelopay.enforcer.intent_states import DRIVEN, START, TRANSITIONS, Move, render_mermaid, target
from envelopay.enforcer.payment_store import IN_FLIGHT, INTENT_STATES, Intent, PaymentStore

from .paykit import make_kit, pay_req, payee_wallet

SPEC = (Path(__file__).resolve().parents[2] / "SPEC.md").read_text()

# Each move the store makes, as the executor calls it.
MOVES: dict[Move, Callable[[PaymentStore, Intent], Awaitable[bool]]] = {
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


def test_spec_draws_the_table() -> None:
    assert render_mermaid() in SPEC


def test_the_table_covers_every_state_and_the_executor_drives_what_is_in_flight() -> None:
    named = {r.state for r in TRANSITIONS} | {r.new_state for r in TRANSITIONS}
    assert named - {START} == set(INTENT_STATES)
    assert set(DRIVEN) <= set(IN_FLIGHT)
    # FAILED only where no money moved or none can move: never from PAID, SENT or a decision.
    failable = {r.state for r in TRANSITIONS if r.move is Move.FAIL}
    assert failable == {"APPROVED", "RESERVED", "SIGNED", "BROADCAST"}
    # Final states have no way out.
    assert not [r for r in TRANSITIONS if r.state in ("SENT", "FAILED", "REJECTED")]


@pytest.mark.parametrize("move", list(MOVES))
async def test_the_store_makes_exactly_the_tables_moves(enforcer: Enforcer, move: Move) -> None:
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
        moved = await MOVES[move](kit.payments.store, intent)
        after = await kit.payments.store.get(new_id)
        assert after is not None
        expected = target(state, move)
        assert moved == (expected is not None), (move, state)
        assert after.state == (expected or state), (move, state)
