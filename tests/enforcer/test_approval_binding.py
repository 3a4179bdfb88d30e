"""An approval is bound to the content the operator was shown in the statement that
approves it: a spend policy changed between the hash check and the approval leaves the
payment held and nothing paid (issue 30). Both backends."""

from __future__ import annotations

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.service.approval_view import approval_view, bind_decision
from envelopay.enforcer.spend.payments_exec import approve
from envelopay.enforcer.spend.policy import SpendLimit, SpendPolicy

from .paykit import CHAIN, USDC, Kit, make_kit, pay_req, payee_wallet


async def _held(kit: Kit) -> tuple[str, str]:
    """(approval id, payer address) of a 5 USDC payment held over a 1 USDC per-payment
    limit, from a wallet that could pay it."""
    token, address = await kit.agent(
        usdc=10 * USDC, limit=SpendLimit(per_payment=1 * USDC, hourly=50 * USDC, daily=20 * USDC))
    d = await kit.payments.submit("pay", token, pay_req(payee_wallet(), 5 * USDC))
    assert d.status == "pending_approval" and d.approval_id, d
    return d.approval_id, address


async def _shown(enforcer: Enforcer, kit: Kit, held: str) -> str:
    view = await approval_view(enforcer, kit.payments, held)
    assert view is not None
    return str(view["content_hash"])


async def test_a_policy_changed_between_the_check_and_the_approval_approves_nothing(
    enforcer: Enforcer,
) -> None:
    kit = await make_kit(enforcer)
    held, address = await _held(kit)
    binding = await bind_decision(enforcer, kit.payments, held, await _shown(enforcer, kit, held))
    assert binding.conflict is None and binding.policy  # the hash matched: bound to this policy
    # The race the single statement closes: the policy changes after the check passed.
    limits = {f"{CHAIN}/USDC": SpendLimit(per_payment=100 * USDC)}
    changed = SpendPolicy(limits=limits, payees=("partner.test",))
    assert await kit.payments.set_policy("buyer", changed)
    d = await approve(kit.payments, held, "operator", binding.policy)
    assert not d.ok and d.state == "PENDING" and d.detail.startswith("content_changed"), d
    seen = await kit.payments.store.get(held)
    assert seen is not None and seen.state == "PENDING" and seen.decided_by is None
    assert kit.payment_txs(address) == []
    # Shown again, the new content binds and the approval goes through, once.
    again = await bind_decision(enforcer, kit.payments, held, await _shown(enforcer, kit, held))
    assert again.conflict is None and again.policy != binding.policy
    d = await approve(kit.payments, held, "operator", again.policy)
    assert d.ok, d
    assert len(kit.payment_txs(address)) == 1


async def test_the_store_approves_only_under_the_policy_it_is_given(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    held, _ = await _held(kit)
    store = kit.payments.store
    intent = await store.get(held)
    assert intent is not None
    now = await store.policy_text(intent.agent_id)
    assert not await store.approve(held, "op", enforcer.clock(), policy=now + " ")
    assert (await _state(kit, held)) == "PENDING"
    assert await store.approve(held, "op", enforcer.clock(), policy=now)
    assert (await _state(kit, held)) == "APPROVED"


async def _state(kit: Kit, held: str) -> str:
    intent = await kit.payments.store.get(held)
    assert intent is not None
    return intent.state


async def test_a_stale_hash_binds_nothing_and_no_policy_reads_as_empty(enforcer: Enforcer) -> None:
    kit = await make_kit(enforcer)
    held, _ = await _held(kit)
    stale = await bind_decision(enforcer, kit.payments, held, "sha256:" + "0" * 64)
    assert stale.conflict is not None and stale.conflict.detail.startswith("content_changed")
    assert stale.conflict.state == "PENDING" and stale.policy is None
    assert (await bind_decision(enforcer, kit.payments, held, None)).policy is None  # unbound: no hash
    await enforcer.create_agent("plain", "plain@agents.test")
    agent = await enforcer.store.agent_by_name("plain")
    assert agent is not None and await kit.payments.store.policy_text(agent.id) == ""
