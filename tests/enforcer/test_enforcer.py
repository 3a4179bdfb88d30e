"""The enforcer core on both stores, delivering to a real aiosmtpd server on loopback."""

from __future__ import annotations

import email
from email import policy as email_policy
from typing import Any

from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore

from .conftest import Clock, Sink

PEER = "bob@partner.test"


def req(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"to": PEER, "from": "a1@agents.test", "subject": "hello", "text": "hi there"}
    return {**base, **changes}


async def make(enf: Enforcer, name: str = "a1", **kw: Any) -> str:
    kw.setdefault("allow", ("partner.test",))
    _, token = await enf.create_agent(name, f"{name}@agents.test", **kw)
    return token


async def test_allowed_send_is_delivered_with_composed_headers(enforcer: Enforcer, sink: Sink) -> None:
    token = await make(enforcer)
    d = await enforcer.send(token, req(in_reply_to="<x@partner.test>", reply_to="a1@agents.test"))
    assert d.status == "sent" and d.message_id and d.id
    assert len(sink.messages) == 1
    mail_from, rcpts, raw = sink.messages[0]
    assert (mail_from, rcpts) == ("a1@agents.test", [PEER])
    msg = email.message_from_bytes(raw, policy=email_policy.default)
    assert msg["Message-ID"] == d.message_id and msg["In-Reply-To"] == "<x@partner.test>"
    assert msg["X-Envelopay-Agent"] == "a1" and msg["Reply-To"] == "a1@agents.test"
    assert msg.get_content().strip() == "hi there"
    status = await enforcer.status(token, d.id or "")
    assert (status.status, status.state, status.message_id) == ("sent", "sent", d.message_id)


async def test_new_agent_defaults_flag_every_recipient(enforcer: Enforcer, sink: Sink) -> None:
    agent, token = await enforcer.create_agent("fresh", "fresh@agents.test")
    assert (agent.policy.hourly_cap, agent.policy.daily_cap, agent.policy.allow) == (20, 100, ())
    d = await enforcer.send(token, req(**{"from": "fresh@agents.test"}))
    assert d.status == "pending_approval" and d.approval_id and d.reason == "recipient not on the allowlist"
    assert sink.messages == []


async def test_identity_comes_from_the_token_not_the_payload(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    t1 = await make(enforcer, "a1", hourly=1)
    await make(enforcer, "a2", hourly=5)
    a2 = await store.agent_by_name("a2")
    assert a2 is not None
    # a1 names a2 (by id and name) and uses a2's address: it still acts as a1.
    forged = req(agent_id=a2.id, agent="a2", agentId=a2.id, **{"from": "a2@agents.test"})
    d = await enforcer.send(t1, forged)
    assert d.status == "blocked" and d.reason == "from must be the agent's own address"
    d = await enforcer.send(t1, req(agent_id=a2.id))
    assert d.status == "sent"
    hour = "2027-01-15T08"
    a1 = await store.agent_by_name("a1")
    assert a1 is not None
    assert await store.counter(a1.id, "h", hour) == 1 and await store.counter(a2.id, "h", hour) == 0
    # a1's own hourly cap of 1 applies, whatever agent the payload names.
    d = await enforcer.send(t1, req(agent_id=a2.id, subject="again"))
    assert d.status == "pending_approval" and d.reason == "hourly cap reached"
    assert len(sink.messages) == 1


async def test_unknown_and_killed_tokens_do_nothing(enforcer: Enforcer, sink: Sink) -> None:
    token = await make(enforcer)
    d = await enforcer.send("epa_not-a-token", req())
    assert (d.status, d.reason) == ("blocked", "unknown agent")
    d = await enforcer.send(None, req())
    assert (d.status, d.reason) == ("blocked", "unknown agent")
    sent = await enforcer.send(token, req())
    assert await enforcer.kill_agent("a1") is not None
    d = await enforcer.send(token, req(subject="after kill"))
    assert (d.status, d.reason) == ("blocked", "killed")
    assert (await enforcer.status(token, sent.id or "")).status == "unknown"
    assert len(sink.messages) == 1
    # Killing again keeps it killed; nothing revives it.
    killed = await enforcer.kill_agent("a1")
    assert killed is not None and killed.status == "KILLED"


async def test_shape_refusals_happen_before_identity(enforcer: Enforcer) -> None:
    # An unknown token with a bad recipient: the recipient check (no I/O) answers first.
    d = await enforcer.send("nobody", req(to="a@b.test,c@d.test"))
    assert d.status == "blocked" and d.reason.startswith("invalid recipient")
    d = await enforcer.send("nobody", req(subject="x\r\nBcc: eve@evil.test"))
    assert d.reason == "invalid header: subject"


async def test_hourly_cap_then_daily_cap_hands_back_the_hourly_slot(
    enforcer: Enforcer, store: EnforcerStore, clock: Clock, sink: Sink
) -> None:
    token = await make(enforcer, hourly=2, daily=3)
    a1 = await store.agent_by_name("a1")
    assert a1 is not None
    results = [await enforcer.send(token, req(subject=f"s{i}")) for i in range(3)]
    assert [r.status for r in results] == ["sent", "sent", "pending_approval"]
    assert results[2].reason == "hourly cap reached"
    clock.now += 3600  # next hour: one daily slot left
    assert (await enforcer.send(token, req(subject="s3"))).status == "sent"
    d = await enforcer.send(token, req(subject="s4"))
    assert (d.status, d.reason) == ("pending_approval", "daily cap reached")
    hour = "2027-01-15T09"
    # The refused daily take handed its hourly slot back: 1 used this hour, not 2.
    assert await store.counter(a1.id, "h", hour) == 1
    assert await store.counter(a1.id, "d", "2027-01-15") == 3
    assert len(sink.messages) == 3


async def test_cap_of_zero_flags_without_touching_counters(enforcer: Enforcer, store: EnforcerStore) -> None:
    t_h = await make(enforcer, "zh", hourly=0)
    t_d = await make(enforcer, "zd", daily=-1)
    d = await enforcer.send(t_h, req(**{"from": "zh@agents.test"}))
    assert (d.status, d.reason) == ("pending_approval", "hourly cap is zero")
    d = await enforcer.send(t_d, req(**{"from": "zd@agents.test"}))
    assert (d.status, d.reason) == ("pending_approval", "daily cap is zero")
    rows = await store.execute_sql("SELECT COUNT(*) FROM enf_counters", ())
    assert rows[0][0] == 0


async def test_allowlist_miss_consumes_no_cap(enforcer: Enforcer, store: EnforcerStore, sink: Sink) -> None:
    token = await make(enforcer, allow=("bob@partner.test",))
    d = await enforcer.send(token, req(to="carol@partner.test"))
    assert (d.status, d.reason) == ("pending_approval", "recipient not on the allowlist")
    rows = await store.execute_sql("SELECT COUNT(*) FROM enf_counters", ())
    assert rows[0][0] == 0 and sink.messages == []


async def test_duplicate_guard_counts_only_successful_sends(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer)
    sink.fail_with = "451 try later"
    first = await enforcer.send(token, req())
    assert first.status == "failed" and first.reason.startswith("delivery failed")
    sink.fail_with = None
    # The failed attempt does not count as a duplicate.
    assert (await enforcer.send(token, req())).status == "sent"
    d = await enforcer.send(token, req())
    assert (d.status, d.reason) == ("blocked", "duplicate of a recent send")
    assert (await enforcer.send(token, req(text="different"))).status == "sent"
    clock.now += 601
    assert (await enforcer.send(token, req())).status == "sent"
    assert len(sink.messages) == 3


async def test_a_database_error_is_failed_not_a_cap(enforcer: Enforcer, store: EnforcerStore) -> None:
    token = await make(enforcer)
    await store.execute_sql("DROP TABLE enf_counters", ())
    d = await enforcer.send(token, req())
    assert d.status == "failed" and d.reason.startswith("store error")
    assert "cap" not in d.reason


async def test_status_is_unknown_for_another_agents_send(enforcer: Enforcer) -> None:
    t1 = await make(enforcer, "a1", allow=())
    t2 = await make(enforcer, "a2")
    d = await enforcer.send(t1, req())
    assert d.status == "pending_approval" and d.approval_id
    mine = await enforcer.status(t1, d.approval_id)
    assert (mine.status, mine.state, mine.approval_id) == ("pending_approval", "pending", d.approval_id)
    theirs = await enforcer.status(t2, d.approval_id)
    assert theirs.status == "unknown" and theirs.reason == "" and theirs.state is None
    assert (await enforcer.status(t1, "no-such-id")).status == "unknown"


async def test_approval_lifecycle_and_conflicts(enforcer: Enforcer, sink: Sink) -> None:
    token = await make(enforcer, allow=())
    a = await enforcer.send(token, req(subject="one"))
    b = await enforcer.send(token, req(subject="two"))
    assert a.approval_id and b.approval_id
    ok = await enforcer.approve(a.approval_id, "alice")
    assert ok.ok and ok.state == "SENT" and ok.disposition and ok.disposition.message_id
    assert len(sink.messages) == 1
    again = await enforcer.approve(a.approval_id, "bob")
    assert (again.ok, again.state) == (False, "SENT")
    assert len(sink.messages) == 1
    rej = await enforcer.reject(b.approval_id, "alice")
    assert rej.ok and rej.state == "REJECTED"
    late = await enforcer.approve(b.approval_id)
    assert (late.ok, late.state) == (False, "REJECTED")
    st = await enforcer.status(token, b.approval_id)
    assert (st.status, st.state) == ("blocked", "rejected")
    st = await enforcer.status(token, a.approval_id)
    assert (st.status, st.state) == ("sent", "sent")
    missing = await enforcer.approve("nope")
    assert (missing.ok, missing.state) == (False, "MISSING")
    c = await enforcer.send(token, req(subject="three"))
    queue = await enforcer.list_approvals()
    # Pending first, then by status priority; direct sends are not queue rows.
    assert [(r.id, r.state) for r in queue] == [
        (c.approval_id, "PENDING"), (b.approval_id, "REJECTED"), (a.approval_id, "SENT")
    ]


async def test_killed_agents_pending_approvals_cannot_be_approved(enforcer: Enforcer, sink: Sink) -> None:
    token = await make(enforcer, allow=())
    d = await enforcer.send(token, req())
    assert d.approval_id
    await enforcer.kill_agent("a1")
    decision = await enforcer.approve(d.approval_id)
    assert decision.ok is False and decision.state == "PENDING" and "killed" in decision.detail
    assert sink.messages == []


async def test_execute_rechecks_kill(enforcer: Enforcer, store: EnforcerStore, sink: Sink) -> None:
    token = await make(enforcer, allow=())
    d = await enforcer.send(token, req())
    assert d.approval_id
    # The approval won the race, then the kill landed before execution.
    assert await store.approve(d.approval_id, "alice", 1.0)
    await enforcer.kill_agent("a1")
    decision = await enforcer.execute(d.approval_id)
    assert decision.state == "FAILED" and decision.detail == "agent killed before execution"
    assert sink.messages == []


async def test_stranded_approved_row_is_retried_after_the_grace_period(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer, allow=())
    d = await enforcer.send(token, req())
    assert d.approval_id
    # A crash right after the APPROVED write: no executor ran.
    assert await store.approve(d.approval_id, "alice", clock.now)
    early = await enforcer.retry(d.approval_id)
    assert (early.ok, early.state) == (False, "APPROVED") and "presumed live" in early.detail
    clock.now += 16
    healed = await enforcer.retry(d.approval_id)
    assert healed.ok and healed.state == "SENT"
    assert len(sink.messages) == 1
    assert (await enforcer.retry(d.approval_id)).state == "SENT"
    assert len(sink.messages) == 1


async def test_outcome_record_makes_re_execution_safe(
    enforcer: Enforcer, store: EnforcerStore, sink: Sink, clock: Clock
) -> None:
    token = await make(enforcer, allow=())
    d = await enforcer.send(token, req())
    assert d.approval_id
    # A crash after delivery and the outcome record, before the row was marked SENT.
    assert await store.approve(d.approval_id, "alice", clock.now)
    await store.put_outcome(d.approval_id, "SENT", "<m@agents.test>", "delivered", clock.now)
    clock.now += 60
    healed = await enforcer.retry(d.approval_id)
    assert healed.ok and healed.state == "SENT"
    assert healed.disposition and healed.disposition.message_id == "<m@agents.test>"
    assert sink.messages == []  # no second delivery


async def test_a_failed_delivery_of_an_approved_send_is_failed(enforcer: Enforcer, sink: Sink) -> None:
    token = await make(enforcer, allow=())
    d = await enforcer.send(token, req())
    assert d.approval_id
    sink.fail_with = "550 mailbox unavailable"
    decision = await enforcer.approve(d.approval_id)
    assert decision.ok is False and decision.state == "FAILED" and "550" in decision.detail
    st = await enforcer.status(token, d.approval_id)
    assert (st.status, st.state) == ("failed", "failed")


async def test_create_agent_refuses_bad_input(enforcer: Enforcer) -> None:
    import pytest

    from envelopay.errors import UsageError

    await make(enforcer)
    for name, address, allow in [
        ("a1", "a1@agents.test", ()),
        ("Bad Name", "x@agents.test", ()),
        ("ok", "x@agents.test, y@agents.test", ()),
        ("ok", "x@agents.test", ("not a domain",)),
    ]:
        with pytest.raises(UsageError):
            await enforcer.create_agent(name, address, allow=allow)


async def test_a_fixed_message_id_makes_outbox_retries_idempotent(enforcer: Enforcer, sink: Sink) -> None:
    from datetime import UTC, datetime

    from envelopay.enforcer.client.http_client import request_from_outbound
    from envelopay.protocol.messages import Which
    from envelopay.protocol.outbound import Outbound

    token = await make(enforcer)
    out = Outbound(sender="a1@agents.test", recipient=PEER, message=Which(note="menu?"),
                   message_id="<row1@agents.test>", date=datetime(2027, 1, 15, tzinfo=UTC))
    body = request_from_outbound(out).to_json()
    first = await enforcer.send(token, body)
    again = await enforcer.send(token, body)
    assert first.status == again.status == "sent"
    assert first.message_id == again.message_id == "<row1@agents.test>" and first.id == again.id
    assert len(sink.messages) == 1
    foreign = await enforcer.send(token, {**body, "message_id": "<row2@elsewhere.test>"})
    assert (foreign.status, foreign.reason) == ("blocked", "message_id must be on the agent's own domain")
    bad = await enforcer.send(token, {**body, "message_id": "<x@agents.test>\r\nBcc: e@evil.test"})
    assert (bad.status, bad.reason) == ("blocked", "invalid header: message_id")


def test_no_statement_revives_an_agent() -> None:
    from envelopay.enforcer.send.schema import SQL as _SQL

    writes = [sql for sql in _SQL.values() if sql.startswith("UPDATE enf_agents")]
    assert writes == [_SQL["kill"]]
    assert "SET status = 'KILLED'" in _SQL["kill"] and "ACTIVE" not in _SQL["kill"]
    # Creation is the only place ACTIVE is written, and it never overwrites an existing agent.
    assert "'ACTIVE'" in _SQL["insert_agent"] and "DO NOTHING" in _SQL["insert_agent"]
