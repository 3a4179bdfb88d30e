"""`check_send_store(factory)`: the enforcer send store's contract (envelopay.enforcer.send.store,
`EnforcerStore`: agents, cap counters, sends and the approval queue, claims, outcomes) as
a public kit both backends run, as `check_store` is for the ledger.

    from envelopay.testing.send_store import check_send_store
    await check_send_store(my_factory)

`factory` is an async callable returning an open, migrated store; it is called once per
check, and the checks use distinct names and ids, so stores over one shared database do.
Each store is closed after its check. A failed check raises AssertionError naming it; the
names of the checks that passed are returned.

Beyond each method's result, the kit holds the guarantees the enforcer's safety rests on:
a cap is one conditional write (concurrent takers never pass the cap), an approval or a
rejection is one conditional update (of two concurrent deciders one wins), a kill beats an
approval that comes after it, a claim has one holder, and a refused batch leaves nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Awaitable, Callable

from envelopay.enforcer.send.model import Agent, Policy, SendRequest
from envelopay.enforcer.send.schema import SEND_MIGRATIONS
from envelopay.enforcer.send.store import EnforcerStore, QueueCursor
from envelopay.testing.kit import run_async_checks

__all__ = ["SEND_CHECKS", "check_send_store"]

Factory = Callable[[], Awaitable[EnforcerStore]]
T0 = 1_800_000_000.0
_seq = itertools.count(1)


def _tag(name: str) -> str:
    return f"{name}-{next(_seq)}-{id(object()):x}"


async def _agent(s: EnforcerStore, tag: str, *, hourly: int = 5, daily: int = 50) -> Agent:
    agent = Agent(
        id=f"ag-{tag}", name=f"name-{tag}", address=f"{tag}@send.test", status="ACTIVE",
        policy=Policy(hourly_cap=hourly, daily_cap=daily, allow=("ok.test", "x@y.test")),
    )
    assert await s.create_agent(agent, f"token-{tag}", T0)
    return agent


def _request(tag: str, n: int = 0) -> SendRequest:
    return SendRequest(
        to="peer@ok.test", sender=f"{tag}@send.test", text=f"body {n}", subject=f"s{n}",
        msg_type="order", body={"id": f"ord_{n}"}, in_reply_to="<r@x>", references=("<a@x>", "<r@x>"),
        message_id=f"<{tag}.{n}@send.test>",
    )


async def _send(s: EnforcerStore, agent: Agent, tag: str, n: int, state: str = "PENDING",
                at: float = T0) -> str:
    sid = f"send-{tag}-{n}"
    await s.insert_send(
        id=sid, agent_id=agent.id, state=state, reason=f"why {n}",  # type: ignore[arg-type]
        request=_request(tag, n), fingerprint=f"fp-{tag}-{n}", message_id=f"<{tag}.{n}@send.test>", now=at,
    )
    return sid


async def check_agents(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("agents")
        agent = await _agent(s, tag)
        dup = Agent(id=f"other-{tag}", name=agent.name, address="z@z.test", status="ACTIVE")
        assert not await s.create_agent(dup, f"token2-{tag}", T0), "a name is taken once"
        for got in (await s.agent_by_token(f"token-{tag}"), await s.agent_by_name(agent.name),
                    await s.agent_by_id(agent.id)):
            assert got == agent, got
        assert await s.agent_by_token("no-such-token") is None
        assert await s.agent_by_name(f"none-{tag}") is None
        assert await s.agent_by_id(f"none-{tag}") is None
        more = [await _agent(s, f"{tag}-{k}") for k in range(3)]
        names = [a.name for a in await s.list_agents(limit=1000)]
        assert names == sorted(names) and {a.name for a in [agent, *more]} <= set(names)
        mine = sorted(a.name for a in [agent, *more])
        page = await s.list_agents(limit=2, after=mine[0])
        assert [a.name for a in page] == [n for n in names if n > mine[0]][:2]
        killed = await s.kill_agent(agent.name)
        assert killed is not None and killed.status == "KILLED" and killed.policy == agent.policy
        again = await s.kill_agent(agent.name)
        assert again is not None and again.status == "KILLED", "a kill is idempotent"
        assert await s.kill_agent(f"none-{tag}") is None
        back = await s.agent_by_token(f"token-{tag}")
        assert back is not None and back.status == "KILLED"
    finally:
        await s.close()


async def check_caps(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("caps")
        agent = await _agent(s, tag)
        win, slot = "h", "2027-01-15T10"
        assert await s.counter(agent.id, win, slot) == 0
        # Twelve concurrent takers of a cap of 5: one conditional write each, five pass.
        got = await asyncio.gather(*(s.take_slot(agent.id, win, slot, 5) for _ in range(12)))
        assert sum(got) == 5, got
        assert await s.counter(agent.id, win, slot) == 5
        await s.give_back(agent.id, win, slot)
        assert await s.counter(agent.id, win, slot) == 4
        assert await s.take_slot(agent.id, win, slot, 5)
        assert not await s.take_slot(agent.id, win, slot, 5)
        for _ in range(7):  # never below zero
            await s.give_back(agent.id, win, slot)
        assert await s.counter(agent.id, win, slot) == 0
        assert await s.counter(agent.id, "d", "2027-01-15") == 0, "windows and slots count apart"
        assert await s.take_slot(agent.id, "d", "2027-01-15", 1)
        assert not await s.take_slot(agent.id, "d", "2027-01-15", 1)
    finally:
        await s.close()


async def check_sends(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("sends")
        agent = await _agent(s, tag)
        sid = await _send(s, agent, tag, 1, "SENT")
        row = await s.get_send(sid)
        assert row is not None and row.state == "SENT" and row.agent_id == agent.id
        assert row.request == _request(tag, 1), row.request
        assert row.reason == "why 1" and row.created_at == T0 and row.agent_name == agent.name
        assert row.message_id == f"<{tag}.1@send.test>" and row.decided_at is None and row.decided_by is None
        by_mid = await s.send_by_message_id(agent.id, f"<{tag}.1@send.test>")
        assert by_mid is not None and by_mid.id == sid
        assert await s.send_by_message_id(agent.id, "<none@x>") is None
        assert await s.get_send(f"none-{tag}") is None
        assert await s.recent_success(agent.id, f"fp-{tag}-1", T0)
        assert not await s.recent_success(agent.id, f"fp-{tag}-1", T0 + 1), "older than `since`"
        assert not await s.recent_success(agent.id, f"fp-{tag}-2", 0)
        await _send(s, agent, tag, 2, "FAILED")
        assert not await s.recent_success(agent.id, f"fp-{tag}-2", 0), "only SENT counts"
    finally:
        await s.close()


async def check_decisions(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("decide")
        agent = await _agent(s, tag)
        a, b, c = [await _send(s, agent, tag, n) for n in (1, 2, 3)]
        # Two deciders at once: one conditional update wins.
        won = await asyncio.gather(s.approve(a, "op1", T0 + 1), s.reject(a, "op2", "no", T0 + 1))
        assert sorted(won) == [False, True], won
        row = await s.get_send(a)
        assert row is not None and row.decided_at == T0 + 1 and row.decided_by in ("op1", "op2")
        assert await s.reject(b, "op", "not today", T0 + 2)
        assert not await s.approve(b, "op", T0 + 3), "a rejected send stays rejected"
        rejected = await s.get_send(b)
        assert rejected is not None and rejected.state == "REJECTED" and rejected.reason == "not today"
        # finish only from APPROVED.
        assert not await s.finish(c, "SENT", "<c@x>", "", T0 + 4)
        assert await s.approve(c, "op", T0 + 4)
        assert not await s.reclaim(c, T0 + 5, T0 + 3), "decided after `older_than`: not stranded"
        assert await s.reclaim(c, T0 + 10, T0 + 4)
        assert not await s.reclaim(c, T0 + 11, T0 + 4), "the reclaim refreshed decided_at: one healer"
        assert await s.finish(c, "SENT", "<c-final@x>", "delivered", T0 + 12)
        assert not await s.finish(c, "FAILED", None, "again", T0 + 13), "finished once"
        done = await s.get_send(c)
        assert done is not None and done.state == "SENT" and done.message_id == "<c-final@x>"
        assert done.reason == "delivered"
    finally:
        await s.close()


async def check_kill_beats_approval(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("kill")
        agent = await _agent(s, tag)
        sid = await _send(s, agent, tag, 1)
        assert await s.kill_agent(agent.name) is not None
        assert not await s.approve(sid, "op", T0 + 1), "an approval after a kill moves nothing"
        row = await s.get_send(sid)
        assert row is not None and row.state == "PENDING"
        assert await s.reject(sid, "op", "killed", T0 + 2), "a killed agent's send can still be rejected"
    finally:
        await s.close()


async def check_queue(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("queue")
        agent = await _agent(s, tag)
        ids = [await _send(s, agent, tag, n, at=T0 + n) for n in range(6)]
        await _send(s, agent, tag, 9, "SENT", at=T0 + 9)  # a direct send: not in the queue view
        assert await s.approve(ids[0], "op", T0 + 20)
        assert await s.reject(ids[1], "op", "no", T0 + 21)
        mine = [r for r in await s.list_sends(limit=10_000) if r.agent_id == agent.id]
        assert [r.id for r in mine] == [ids[5], ids[4], ids[3], ids[2], ids[0], ids[1]], [r.id for r in mine]
        first = await s.list_sends(limit=2)
        rest = await s.list_sends(limit=10_000, after=QueueCursor.of(first[-1]))
        assert {r.id for r in first}.isdisjoint(r.id for r in rest)
        cursor = QueueCursor.parse(QueueCursor.of(first[-1]).token())
        assert cursor == QueueCursor.of(first[-1])
        assert QueueCursor.parse("nonsense") is None
    finally:
        await s.close()


async def check_claims(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("claims")
        agent = await _agent(s, tag)
        key = f"<{tag}@claim>"
        won = await asyncio.gather(*(s.claim(agent.id, "msgid", key, f"s{n}", T0, T0 - 60) for n in range(4)))
        assert sum(won) == 1, won
        holder = await s.claim_holder(agent.id, "msgid", key)
        assert holder == f"s{won.index(True)}"
        await s.release(agent.id, "msgid", key, "someone-else")
        assert await s.claim_holder(agent.id, "msgid", key) == holder, "only the holder releases"
        await s.release(agent.id, "msgid", key, holder)
        assert await s.claim_holder(agent.id, "msgid", key) is None
        # A fingerprint claim is taken over once older than the window.
        assert await s.claim(agent.id, "fp", "f1", "a", T0, T0 - 600)
        assert not await s.claim(agent.id, "fp", "f1", "b", T0 + 1, T0 - 600)
        assert await s.claim(agent.id, "fp", "f1", "b", T0 + 700, T0 + 100)
        assert await s.claim_holder(agent.id, "fp", "f1") == "b"
        # A Message-ID claim whose send FAILED is free again.
        sid = await _send(s, agent, tag, 1, "FAILED")
        assert await s.claim(agent.id, "msgid", "m2", sid, T0, T0 - 60)
        assert await s.claim(agent.id, "msgid", "m2", "next", T0 + 1, T0 - 60)
    finally:
        await s.close()


async def check_outcomes(factory: Factory) -> None:
    s = await factory()
    try:
        sid = _tag("outcome")
        assert await s.get_outcome(sid) is None
        await s.put_outcome(sid, "failed", None, "first", T0)
        assert await s.get_outcome(sid) == ("failed", None, "first")
        await s.put_outcome(sid, "sent", "<m@x>", "", T0 + 1)
        assert await s.get_outcome(sid) == ("sent", "<m@x>", "")
    finally:
        await s.close()


async def check_batches(factory: Factory) -> None:
    s = await factory()
    try:
        tag = _tag("batch")
        agent = await _agent(s, tag)
        take = s.step("take_slot", (agent.id, "h", "b1", 1))
        ok = await s.transaction([take, s.send_step(
            id=f"b-{tag}", agent_id=agent.id, state="SENT", reason="", request=_request(tag),
            fingerprint="f", message_id=None, now=T0,
        )])
        assert ok.committed and ok.rows[0] == [(1,)], ok
        refused = await s.transaction(
            [s.step("take_slot", (agent.id, "h", "b2", 1)), take], require_rows=True
        )
        assert refused.refused_at == 1 and not refused.committed
        assert await s.counter(agent.id, "h", "b2") == 0, "a refused batch leaves nothing"
        assert (await s.get_send(f"b-{tag}")) is not None
        quick = await s.transaction([s.step("take_slot", (agent.id, "h", "b3", 1))], durable=False)
        assert quick.committed and await s.counter(agent.id, "h", "b3") == 1, "a non-durable commit commits"
        (named_counter,) = await s.execute("counter", (agent.id, "h", "b3"))
        assert named_counter["sends"] == 1
        rows = await s.execute_sql("SELECT sends FROM enf_counters WHERE agent_id = ? AND slot = ?",
                                   (agent.id, "b1"))
        assert rows == [(1,)]
        named = await s.fetch("SELECT sends AS n FROM enf_counters WHERE agent_id = ? AND slot = ?",
                              (agent.id, "b1"))
        assert [r["n"] for r in named] == [1]
    finally:
        await s.close()


async def check_locks_and_liveness(factory: Factory) -> None:
    s = await factory()
    try:
        assert await s.alive(s.instance)
        assert not await s.alive(uuid.uuid4().hex), "an instance never opened is not alive"
        other = await factory()  # another process's store, as far as liveness goes
        assert await s.alive(other.instance)
        await other.close()
        assert not await s.alive(other.instance), "a closed store is not alive"
        order: list[str] = []

        async def hold(name: str) -> None:
            async with s.wallet_lock(f"w-{id(s)}"):
                order.append(f"in {name}")
                await asyncio.sleep(0)
                order.append(f"out {name}")

        await asyncio.gather(hold("a"), hold("b"))
        assert order in (["in a", "out a", "in b", "out b"], ["in b", "out b", "in a", "out a"]), order
    finally:
        await s.close()


async def check_migrate_idempotent(factory: Factory) -> None:
    s = await factory()
    try:
        assert await s.migrate(SEND_MIGRATIONS) == SEND_MIGRATIONS.latest
        assert await s.migrate(SEND_MIGRATIONS) == SEND_MIGRATIONS.latest
    finally:
        await s.close()


SEND_CHECKS: tuple[Callable[[Factory], Awaitable[None]], ...] = (
    check_agents,
    check_caps,
    check_sends,
    check_decisions,
    check_kill_beats_approval,
    check_queue,
    check_claims,
    check_outcomes,
    check_batches,
    check_locks_and_liveness,
    check_migrate_idempotent,
)


async def check_send_store(factory: Factory) -> list[str]:
    """Run every send-store check against stores made by `factory`; return their names."""
    return await run_async_checks(SEND_CHECKS, factory)
