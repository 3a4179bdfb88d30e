"""The outbox drainer on a real SQLite ledger and a real garden."""

from __future__ import annotations

import asyncio
import socket
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outbox import DirectHook, OutboxDrainer, SendResult
from envelopay.ledger.sqlite import SqliteStore
from envelopay.mail.garden import GardenServer
from envelopay.mail.transport.garden import GardenTransport
from envelopay.protocol.messages import Which
from envelopay.protocol.outbound import Outbound


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def _queue(tmp_path: Path, n: int, clock: Clock) -> tuple[SqliteStore, list[str]]:
    store = SqliteStore(str(tmp_path / "a.db"))
    store.migrate()
    engine = Engine(store, address="a@garden.local", domain="garden.local", rails={}, app=BaseApplication(),
                    clock=clock)
    mids = [(await engine.send(Which(id=f"w{i}"), "b@garden.local")).message_id for i in range(n)]
    return store, mids


async def test_overlapping_drains_send_each_row_once(tmp_path: Path) -> None:
    clock = Clock()
    store, mids = await _queue(tmp_path, 30, clock)
    async with GardenServer(tmp_path / "garden", ["b@garden.local"], open_garden=True) as garden:
        transport = GardenTransport(garden.endpoint)
        drainer = OutboxDrainer(store, DirectHook(transport), clock=clock)
        reports = await asyncio.gather(*(drainer.drain() for _ in range(5)))
        await transport.close()
        delivered = list((garden.maildir("b@garden.local") / "new").iterdir())
    assert sorted(m for r in reports for m in r.sent) == sorted(mids)
    assert len(delivered) == 30
    assert store.outbox_pending(clock.now) == []
    store.close()


async def test_failed_send_is_retried_later_then_given_up(tmp_path: Path) -> None:
    clock = Clock()
    store, mids = await _queue(tmp_path, 1, clock)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = GardenTransport(("127.0.0.1", port), timeout=5)
    drainer = OutboxDrainer(store, DirectHook(transport), clock=clock, max_attempts=2,
                            backoff=lambda n: timedelta(seconds=10))
    rep = await drainer.drain()
    assert rep.retry == mids and rep.sent == []
    assert store.outbox_pending(clock.now) == []  # not due again yet
    clock.now += timedelta(seconds=11)
    rep = await drainer.drain()
    assert rep.failed == mids  # second attempt was the last
    row = store.outbox_get(mids[0])
    assert row is not None and row.status == "failed" and row.last_error
    store.close()


async def test_enforcer_verdicts_map_to_row_states(tmp_path: Path) -> None:
    clock = Clock()
    store, mids = await _queue(tmp_path, 2, clock)
    verdicts = {mids[0]: SendResult("blocked", "recipient not allowed"),
                mids[1]: SendResult("pending_approval")}

    async def hook(out: Outbound, raw: bytes) -> SendResult:
        assert out.message_id.encode() in raw  # the composed bytes carry the fixed Message-ID
        return verdicts[out.message_id]

    rep = await OutboxDrainer(store, hook, clock=clock).drain()
    assert rep.failed == [mids[0]] and rep.held == [mids[1]]
    first, second = store.outbox_get(mids[0]), store.outbox_get(mids[1])
    assert first is not None and first.status == "failed"
    assert second is not None and second.status == "sent"
    store.close()


async def test_enforcer_as_the_send_hook(tmp_path: Path) -> None:
    """The real enforcer service: an allowed message is signed and delivered by it, one
    to a recipient outside the agent's allowlist waits for approval (handed over), and
    once the agent is killed a message is blocked for good."""
    from envelopay import dkim
    from envelopay.dkim import dkim_signer
    from envelopay.enforcer.client.http_client import EnforcerClient
    from envelopay.enforcer.send.backends import SqliteStore as EnforcerSqlite
    from envelopay.enforcer.send.enforcer import Enforcer, hash_token
    from envelopay.enforcer.service.server import start_server
    from envelopay.engine.outbox import EnforcerHook
    from envelopay.mail.transport.garden import GardenTransport

    clock = Clock()
    store, mids = await _queue(tmp_path, 1, clock)
    engine = Engine(store, address="a@garden.local", domain="garden.local", rails={}, app=BaseApplication(),
                    clock=clock)
    held = (await engine.send(Which(id="w-out"), "c@elsewhere.example")).message_id
    key = dkim.DkimKey.generate_ed25519()
    async with GardenServer(tmp_path / "garden", ["b@garden.local"], open_garden=True) as garden:
        enf_store = EnforcerSqlite(tmp_path / "enf.db")
        await enf_store.open()
        transport = GardenTransport(garden.port, reuse=False)
        enforcer = Enforcer(enf_store, transport, operator_token_hash=hash_token("op"),
                            signer=dkim_signer(key, selector="a", domain="garden.local"))
        _, token = await enforcer.create_agent("a", "a@garden.local", allow=("garden.local",))
        runner, url = await start_server(enforcer)
        try:
            async with EnforcerClient(url, token) as client:
                rep = await OutboxDrainer(store, EnforcerHook(client), clock=clock).drain()
                first = store.outbox_get(mids[0])
                assert first is not None
                again = await EnforcerHook(client)(first.outbound, b"")
                await enforcer.kill_agent("a")
                blocked = (await engine.send(Which(id="w-late"), "b@garden.local")).message_id
                late = await OutboxDrainer(store, EnforcerHook(client), clock=clock).drain()
        finally:
            await runner.cleanup()
            await enf_store.close()
        delivered = [p.read_bytes() for p in (garden.maildir("b@garden.local") / "new").iterdir()]
    assert rep.sent == mids and rep.held == [held], rep
    assert late.failed == [blocked], late
    assert len(delivered) == 1 and mids[0].encode() in delivered[0]
    assert b"DKIM-Signature:" in delivered[0]  # signed by the enforcer, which holds the key
    assert again.status == "sent"  # a retried row is answered from the record, not sent twice
    row = store.outbox_get(blocked)
    assert row is not None and row.status == "failed" and "blocked" in (row.last_error or "")
    handed = store.outbox_get(held)
    assert handed is not None and handed.status == "sent"  # the enforcer's queue owns it now
    store.close()


def test_config_picks_the_enforcer_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envelopay.config import config_from_dict
    from envelopay.engine.outbox import EnforcerHook
    from envelopay.errors import ConfigError
    from envelopay.node.agent_node import build_node

    cfg = config_from_dict({
        "agent": {"address": "a@garden.local", "domain": "garden.local", "ledger": str(tmp_path / "a.db")},
        "transport": {"enforcer": "http://127.0.0.1:9", "enforcer_token_env": "EP_TEST_TOKEN"},
    }, base_dir=tmp_path)
    monkeypatch.delenv("EP_TEST_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="EP_TEST_TOKEN"):
        build_node(cfg, rails={})
    monkeypatch.setenv("EP_TEST_TOKEN", "agent-token")
    node = build_node(cfg, rails={})
    try:
        assert isinstance(node.drainer.hook, EnforcerHook)
        assert node.transport is None  # the agent holds no transport credential
    finally:
        asyncio.run(node.close())
        node.store.close()


def test_node_keeps_recent_outcomes_only() -> None:
    from envelopay.engine import Outcome
    from envelopay.node import agent_node as node_mod

    n = node_mod.AgentNode(engine=None, drainer=None, dns=None)  # type: ignore[arg-type]
    cursor = n.received
    for i in range(node_mod.RECENT + 5):
        n.outcomes.append(Outcome("ignored", f"<m{i}@x>"))
        n.received += 1
    assert len(n.outcomes) == node_mod.RECENT
    assert [o.message_id for o in n.outcomes_since(n.received - 2)] == [
        f"<m{node_mod.RECENT + 3}@x>", f"<m{node_mod.RECENT + 4}@x>"
    ]
    assert len(n.outcomes_since(cursor)) == node_mod.RECENT  # older ones are gone, not repeated
    assert n.outcomes_since(n.received) == []


async def test_parallel_drain_keeps_each_flows_rows_in_order(tmp_path: Path) -> None:
    # Three flows with three rows each, drained with up to two sends in flight: rows of
    # different flows overlap, the rows of one flow go strictly one after another.
    from envelopay.ledger.store import Commit

    clock = Clock()
    store = SqliteStore(str(tmp_path / "a.db"))
    store.migrate()
    rows: list[tuple[Outbound, str | None]] = []
    for f in range(3):
        for i in range(3):
            ob = Outbound(sender="a@garden.local", recipient="b@garden.local", message=Which(id=f"w{f}{i}"),
                          message_id=f"<m{f}{i}@garden.local>", date=clock.now)
            rows.append((ob, f"flow{f}"))
    commit = Commit(local="a@garden.local", now=clock.now, outcome={}, outbox=tuple(rows))
    assert store.commit_step(commit) == "ok"
    order: list[str] = []
    in_flight: list[str] = []
    most = 0

    async def hook(out: Outbound, raw: bytes) -> SendResult:
        nonlocal most
        flow = out.message_id[2]
        assert all(m[2] != flow for m in in_flight), "two rows of one flow in flight"
        in_flight.append(out.message_id)
        most = max(most, len(in_flight))
        await asyncio.sleep(0.01)
        in_flight.remove(out.message_id)
        order.append(out.message_id)
        return SendResult("sent")

    rep = await OutboxDrainer(store, hook, clock=clock, parallel=2).drain()
    assert sorted(rep.sent) == sorted(ob.message_id for ob, _ in rows)
    assert most == 2
    for f in range(3):
        assert [m for m in order if m[2] == str(f)] == [f"<m{f}{i}@garden.local>" for i in range(3)]
    assert store.outbox_pending(clock.now) == []
    store.close()


async def test_garden_pool_delivers_over_several_connections(tmp_path: Path) -> None:
    from envelopay.node.agent_node import GardenPool

    clock = Clock()
    store, mids = await _queue(tmp_path, 24, clock)
    async with GardenServer(tmp_path / "garden", ["b@garden.local"], open_garden=True) as garden:
        pool = GardenPool([GardenTransport(garden.endpoint) for _ in range(4)])
        rep = await OutboxDrainer(store, DirectHook(pool), clock=clock, parallel=pool.size).drain()
        opened = sum(t._client is not None for t in pool._all)
        await pool.close()
        delivered = list((garden.maildir("b@garden.local") / "new").iterdir())
    assert sorted(rep.sent) == sorted(mids)
    assert len(delivered) == 24
    assert opened == 4  # each connection carried a share
    assert store.outbox_pending(clock.now) == []
    store.close()


def test_parallel_must_be_positive(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "a.db"))
    with pytest.raises(ValueError):
        OutboxDrainer(store, DirectHook(GardenTransport(tmp_path / "sock")), parallel=0)
    store.close()
