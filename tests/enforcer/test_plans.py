"""Every statement the enforcer's hot paths send is an index search on both backends,
at a size where a wrong plan shows: 10,000 agents and 20,000 payment intents.

The statements are not copied here: the operations run against the filled store through
a recording wrapper (a payment made and sent, one held, approved and executed, a kill,
a status, the approval queue, the finisher's pass; a send made, one held and approved,
the approval and agent pages), and every statement they sent is
EXPLAINed with the parameters it was sent with. This found the ACTIVE guard that read
every agent per transition (8.6 ms a statement on SQLite at 10,000 agents).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.retention import compact_enforcer
from envelopay.enforcer.spend.finisher import Finisher
from envelopay.enforcer.spend.payments_exec import approve

from .conftest import Sink
from .paykit import USDC, make_kit, pay_req, payee_wallet

AGENTS = 10_000
INTENTS = 20_000
_TABLES = (
    "enf_agents", "enf_payments", "enf_sends", "enf_counters", "enf_claims", "enf_outcomes",
    "enf_wallets", "enf_spend_policies", "enf_spend_counters",
)


async def _fill(store: EnforcerStore) -> None:
    """Agents (with wallets and policies), finished intents, sends with their claims and
    outcomes, written through the tables' own columns."""
    agents = [
        (
            "INSERT INTO enf_agents (id, name, address, token_hash, status, hourly_cap, daily_cap, allow,"
            " created_at) VALUES (?, ?, ?, ?, ?, 10, 100, '[]', 1.0)",
            (f"fa{k}", f"fill{k}", f"f{k}@fill.test", hash_token(f"t{k}"), "ACTIVE" if k % 9 else "KILLED"),
        )
        for k in range(AGENTS)
    ]
    await store.transaction(agents)
    wallets = [
        (
            "INSERT INTO enf_wallets (id, agent_id, chain, address, label, sealed, created_at)"
            " VALUES (?, ?, ?, ?, ?, 'x', 1.0)",
            (f"fw{k}-{chain}-{label}", f"fa{k}", chain, f"addr{k}{label}", label),
        )
        for k in range(AGENTS)
        for chain, label in (("solana-local", "default"), ("solana-local", "b"), ("base-local", "default"))
    ]
    await store.transaction(wallets)
    policy = json.dumps({"limits": {}, "payees": [], "wallets": [], "require_invoice": False})
    put_policy = "INSERT INTO enf_spend_policies (agent_id, policy, updated_at) VALUES (?, ?, 1.0)"
    await store.transaction([(put_policy, (f"fa{k}", policy)) for k in range(AGENTS)])
    sends = [
        (
            "INSERT INTO enf_sends (id, agent_id, state, reason, request, fingerprint, message_id,"
            " created_at, decided_at, decided_by, updated_at)"
            " VALUES (?, ?, 'SENT', '', '{}', ?, ?, ?, NULL, NULL, ?)",
            (f"fs{k}", f"fa{k % AGENTS}", f"fp{k}", f"<fs{k}@fill.test>", 1.0 + k, 1.0 + k),
        )
        for k in range(INTENTS)
    ]
    await store.transaction(sends)
    claim = "INSERT INTO enf_claims (agent_id, kind, claim_key, send_id, at) VALUES (?, 'fp', ?, ?, ?)"
    await store.transaction(
        [(claim, (f"fa{k % AGENTS}", f"fp{k}", f"fs{k}", 1.0 + k)) for k in range(INTENTS)]
    )
    # Mail and spend counters of two years (retention deletes the first): hour and day slots.
    slots = [
        (f"fa{k % AGENTS}", win, f"{2020 + k // AGENTS}-06-15{hour}")
        for k in range(INTENTS)
        for win, hour in (("h", f"T{k % 24:02d}"), ("d", ""))
        if win == "h" or k % 24 == 0
    ]
    counter = "INSERT INTO enf_counters (agent_id, win, slot, sends) VALUES (?, ?, ?, 1)"
    await store.transaction([(counter, slot) for slot in slots])
    spend = "INSERT INTO enf_spend_counters (agent_id, asset, win, slot, spent) VALUES (?, ?, ?, ?, 1)"
    await store.transaction([(spend, (agent, "solana-local/USDC", win, slot)) for agent, win, slot in slots])
    outcome = "INSERT INTO enf_outcomes (send_id, state, message_id, detail, at) VALUES (?, 'SENT', ?, '', 1)"
    await store.transaction([(outcome, (f"fs{k}", f"<fs{k}@fill.test>")) for k in range(INTENTS)])
    cols = (
        "id, agent_id, idem_key, invoice_key, kind, state, code, reason, request, chain, token, amount,"
        " decimals, payee, wallet, wallet_id, invoice_ref, message_id, taken, tx_id, tx_blob, created_at,"
        " decided_at, decided_by, updated_at"
    )
    states = ("SENT", "SENT", "SENT", "FAILED", "REJECTED", "PENDING")
    intents = [
        (
            f"INSERT INTO enf_payments ({cols}) VALUES (?, ?, ?, NULL, 'pay', ?, '', '', ?, 'solana-local',"
            " 'USDC', 1, 6, 'x@fill.test', 'w', 'wid', NULL, ?, '[]', ?, NULL, ?, NULL, NULL, ?)",
            (
                f"fi{k}",
                f"fa{k % AGENTS}",
                f"k{k}",
                states[k % len(states)],
                json.dumps({"payment": {}, "mail": None}),
                f"<fi{k}@fill.test>",
                f"tx{k}" if k % len(states) < 3 else None,
                1.0 + k,
                1.0 + k,
            ),
        )
        for k in range(INTENTS)
    ]
    await store.transaction(intents)


def _record(store: EnforcerStore, seen: list[tuple[str, Sequence[Any]]]) -> None:
    execute_sql, fetch, transaction = store.execute_sql, store.fetch, store.transaction

    async def recording_sql(sql: str, params: Sequence[Any]) -> Any:
        seen.append((sql, tuple(params)))
        return await execute_sql(sql, params)

    async def recording_fetch(sql: str, params: Sequence[Any]) -> Any:  # rows by name
        seen.append((sql, tuple(params)))
        return await fetch(sql, params)

    async def recording_tx(steps: Any, **kw: Any) -> Any:
        seen.extend((sql, tuple(p)) for sql, p in steps)
        return await transaction(steps, **kw)

    store.execute_sql, store.transaction = recording_sql, recording_tx  # type: ignore[method-assign]
    store.fetch = recording_fetch  # type: ignore[method-assign]


async def _hot_paths(enforcer: Enforcer, sink: Sink, seen: list[tuple[str, Sequence[Any]]]) -> None:
    kit = await make_kit(enforcer)  # creates the payment tables
    await _fill(enforcer.store)
    token, _ = await kit.agent()
    stranger_token, _ = await kit.agent("other")
    await _analyze(enforcer.store)
    _record(enforcer.store, seen)
    paid = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="p1"))
    assert paid.status == "paid_and_sent", paid
    held = await kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC, key="p2", to="x@else.test"))
    assert held.status == "pending_approval", held
    assert next(i.id for i in await kit.payments.store.queue(50)) == held.id
    decision = await approve(kit.payments, held.id)
    assert decision.ok, decision
    assert (await kit.payments.status(token, paid.id)).status == "paid_and_sent"
    sink.fail_with = "451 4.7.1 later"
    later = await kit.payments.submit("pay", stranger_token, pay_req(payee_wallet(), USDC, key="p3"))
    assert later.state == "paid", later
    sink.fail_with = None
    assert await Finisher(kit.payments, settle=0.0).once() == 1
    # The send path: a direct send, a held one approved, the approval and agent pages.
    mail = {"to": "peer@partner.test", "from": "buyer@agents.test", "type": "order",
            "body": {"type": "order", "id": "o-plan", "task": "t", "v": "0.1.0"}}
    assert (await enforcer.send(token, mail)).status == "sent"
    queued = await enforcer.send(token, {**mail, "to": "peer@else.test"})
    assert queued.status == "pending_approval" and queued.id, queued
    page, _ = await enforcer.approvals_page(50)
    assert page and page[0].id == queued.id
    assert (await enforcer.approve(queued.id)).ok
    await enforcer.approvals_page(50, None)
    agents, after = await enforcer.agents_page(50)
    assert len(agents) == 50 and after is not None
    await enforcer.agents_page(50, after)
    assert await enforcer.kill_agent("other") is not None
    killed = await kit.payments.submit("pay", stranger_token, pay_req(payee_wallet(), USDC, key="p4"))
    assert killed.status == "blocked"


async def _analyze(store: EnforcerStore) -> None:
    await store.execute_sql("ANALYZE", ())


_SQLITE_FULL_SCAN = re.compile(r"^SCAN (\w+)( AS \w+)?$")  # a table walk, no index
_SQLITE_RANGE = re.compile(r"^SEARCH .*[<>]")  # an index walk over a range, not one key


def _sqlite_bad(store: SqliteStore, sql: str, params: Sequence[Any]) -> list[str]:
    """Full scans; and a sort, unless every search pins its rows by keys alone (an agent's
    few wallets on one chain may be sorted)."""
    assert store._conn is not None
    detail = [str(r[3]) for r in store._conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()]
    ranged = any(_SQLITE_RANGE.match(d) for d in detail) or not any(d.startswith("SEARCH") for d in detail)
    return [d for d in detail if _SQLITE_FULL_SCAN.match(d) or ("TEMP B-TREE" in d and ranged)]


def _pg_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for sub in plan.get("Plans", ()):
        yield from _pg_nodes(sub)


def _pg_bad(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> list[str]:
    row = conn.execute("EXPLAIN (FORMAT JSON) " + sql.replace("?", "%s"), params).fetchone()
    assert row is not None
    return [
        f"{n['Node Type']} {n.get('Relation Name', '')}"
        for n in _pg_nodes(row[0][0]["Plan"])
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") in _TABLES
    ]


def _explained(seen: list[tuple[str, Sequence[Any]]]) -> dict[str, Sequence[Any]]:
    """One example of each distinct statement that reads a table (not DDL, not ANALYZE)."""
    out: dict[str, Sequence[Any]] = {}
    for sql, params in seen:
        head = sql.lstrip().split(None, 1)[0].upper()
        if head in ("CREATE", "DROP", "ALTER", "ANALYZE", "BEGIN", "COMMIT", "SET") or "enf_" not in sql:
            continue
        if head == "INSERT" and " SELECT " not in sql.upper() and "ON CONFLICT" not in sql.upper():
            continue  # a plain VALUES insert reads nothing
        out.setdefault(sql, params)
    return out


async def test_the_spend_enforcers_statements_use_indexes(
    store: EnforcerStore, enforcer: Enforcer, sink: Sink, pg_dsn: str
) -> None:
    seen: list[tuple[str, Sequence[Any]]] = []
    await _hot_paths(enforcer, sink, seen)
    statements = _explained(seen)
    assert len(statements) >= 15, list(statements)
    _assert_index_searches(store, statements, pg_dsn)


async def test_the_enforcers_compaction_statements_use_indexes(
    store: EnforcerStore, enforcer: Enforcer, pg_dsn: str
) -> None:
    """`enforcer compact` costs what it removes: a run that takes the oldest few hundred
    of 20,000 sends, claims and intents, and one year of 20,000 spend counters, walks
    indexes only (the intents' partial index holds the finished ones not compacted yet)."""
    await make_kit(enforcer)  # the payment tables
    await _fill(store)
    await _analyze(store)
    seen: list[tuple[str, Sequence[Any]]] = []
    _record(store, seen)
    now = 1_609_459_200.0  # 2021-01-01: the 2020 counter slots are past; cut-off at 301 s
    report = await compact_enforcer(store, older_than=now - 301.0, now=now, batch=100)
    assert (report.sends, report.claims, report.payments) == (300, 300, 250)  # 5 of 6 intents finished
    assert report.spend_counters > 10_000 and report.counters > 10_000
    statements = _explained(seen)
    assert sum("enf_" in sql for sql in statements) >= 6, list(statements)
    _assert_index_searches(store, statements, pg_dsn)


def _assert_index_searches(store: EnforcerStore, statements: dict[str, Sequence[Any]], pg_dsn: str) -> None:
    bad: dict[str, list[str]] = {}
    if isinstance(store, SqliteStore):
        for sql, params in statements.items():
            if found := _sqlite_bad(store, sql, params):
                bad[sql] = found
    else:
        assert isinstance(store, PostgresStore)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for sql, params in statements.items():
                if found := _pg_bad(conn, sql, params):
                    bad[sql] = found
    assert bad == {}, "\n".join(f"{found}  <-  {sql}" for sql, found in bad.items())
