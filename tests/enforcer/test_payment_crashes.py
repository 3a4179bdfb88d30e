"""The enforcer SIGKILLed at each point of a payment (between intent and sign, sign and
broadcast, broadcast and record, record and email), restarted each time, paying over a
Solana JSON-RPC dev node both processes see: one transaction per intent on the chain,
every intent ends paid and sent, and a retried call returns the first outcome. On both
stores, 50 payments each (40 of them killed). Each enforcer process is forked from a
fork server that has done payserver's imports (tests/_zygote.py): the interpreter start
and imports, most of a start, are paid once per test."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests._zygote import PIPE, Child, Zygote

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.enforcer.client.payment_client import PaymentClient
from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.payments import CRASH_ENV, CRASH_POINTS
from envelopay.errors import TransportError
from envelopay.protocol.parse import parse
from envelopay_solana.devnode import solana_rpc_handler

from .conftest import Sink
from .paykit import USDC, make_kit, pay_req, payee_wallet

SERVER = Path(__file__).with_name("payserver.py")


async def _start(z: Zygote, db: Path | str, sock: Path, sink: Sink, rpc: str, crash: str | None) -> Child:
    """A new enforcer process, forked from `z` (which has done payserver's imports: a
    start costs the store's open and the recovery, not an interpreter start)."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    proc = z.spawn([str(db), str(sock), str(sink.port), rpc], env=env, stdout=PIPE)
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    except BaseException:
        proc.kill()
        raise
    assert line.strip() == "ready", line
    return proc


async def _kill(proc: Child) -> None:
    proc.kill()
    await asyncio.to_thread(proc.wait, 30)


@pytest.fixture(scope="module")
def forks() -> Iterator[Zygote]:
    """The fork server for the enforcer processes (it only forks, so tests can share it)."""
    with Zygote(SERVER) as z:
        yield z


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_sigkill_at_every_point_of_50_payments(
    backend: str, tmp_path: Path, sink: Sink, request: pytest.FixtureRequest, forks: Zygote
) -> None:
    sock = tmp_path / "enf.sock"
    db: Path | str
    store: EnforcerStore
    if backend == "sqlite":
        db = tmp_path / "enf.db"
        store = SqliteStore(db)
    else:
        db = request.getfixturevalue("pg_dsn")
        store = PostgresStore(db)
    await store.open()
    from envelopay.mail.transport.smtp import SmtpConfig
    from envelopay.mail.transport.submission import SmtpTransport

    local = Enforcer(
        store, SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    )
    kit = await make_kit(local)
    token, address = await kit.agent(usdc=100 * USDC)
    to = payee_wallet()
    rng = random.Random(14)
    points: list[str | None] = [*CRASH_POINTS, None]
    plan = [points[n % len(points)] for n in range(50)]
    rng.shuffle(plan)
    crashes = 0
    z = forks
    async with JsonRpcServer(solana_rpc_handler(kit.chain)) as node:
        proc = await _start(z, db, sock, sink, node.url, plan[0])
        try:
            for n, crash in enumerate(plan):
                req = pay_req(to, USDC, key=f"crash{n}")
                try:
                    async with PaymentClient(str(sock), token, timeout=30) as client:
                        first = await client.submit("pay", req)
                except TransportError:
                    first = None
                if crash is None:
                    assert first is not None and first.status == "paid_and_sent"
                else:
                    assert first is None, (crash, first)  # the process died at the point
                    assert await asyncio.to_thread(proc.wait, 30) == -9
                    crashes += 1
                nxt = plan[n + 1] if n + 1 < len(plan) else None
                if crash is not None or nxt is not None:
                    if proc.returncode is None:
                        await _kill(proc)
                    assert proc.stdout is not None
                    proc.stdout.close()
                    proc = await _start(z, db, sock, sink, node.url, nxt)
                # Recovery ran at start; the retried call answers with the one outcome.
                async with PaymentClient(str(sock), token, timeout=30) as client:
                    again = await client.submit("pay", req)
                assert again.status == "paid_and_sent", (crash, again)
                if first is not None:
                    assert (again.id, again.tx_id) == (first.id, first.tx_id)
        finally:
            if proc.returncode is None:
                await _kill(proc)
    assert crashes == sum(1 for c in plan if c is not None) == 40
    intents = [i for i in await kit.payments.store.queue(1000)]
    assert intents == []  # no payment was ever held
    txs = kit.payment_txs(address)
    rows = await store.execute_sql("SELECT state, tx_id, message_id FROM enf_payments", ())
    assert len(rows) == 50 and {r[0] for r in rows} == {"SENT"}
    assert len(txs) == 50 and set(txs) == {r[1] for r in rows}  # one transaction per intent
    assert kit.usdc_of(to) == 50 * USDC
    delivered = [parse(raw).message_id for _f, _t, raw in sink.messages]
    assert {r[2] for r in rows} <= set(delivered)  # every PAY went out
    await store.close()
