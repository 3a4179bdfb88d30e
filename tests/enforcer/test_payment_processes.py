"""Two enforcer processes on one store paying from one wallet at the same time (SQLite
and PostgreSQL, over a Solana JSON-RPC dev node both see): the wallet lock is held across
processes, so every payment is its own transaction, none is lost to a shared blockhash,
and exactly the expected amount leaves the wallet."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from envelopay.devnet.rpc_server import JsonRpcServer
from envelopay.enforcer.client.payment_client import PaymentClient
from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.model import PaymentDisposition
from envelopay.enforcer.spend.payments import CRASH_ENV
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport
from envelopay_solana.devnode import solana_rpc_handler

from .conftest import Sink
from .paykit import USDC, make_kit, pay_req, payee_wallet

SERVER = Path(__file__).with_name("payserver.py")
PAYMENTS = 24  # 12 through each process, all 1 USDC to one payee: identical but for the key


async def _start(url: str, sock: Path, sink: Sink, rpc: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(SERVER), url, str(sock), str(sink.port), rpc, env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert line.strip() == b"ready", line
    return proc


async def _pay(sock: Path, token: str, to: str, key: str) -> PaymentDisposition:
    async with PaymentClient(str(sock), token, timeout=60) as client:
        return await client.submit("pay", pay_req(to, USDC, key=key))


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_two_enforcer_processes_pay_from_one_wallet(
    backend: str, tmp_path: Path, sink: Sink, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "enf.db") if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    store: EnforcerStore = SqliteStore(url) if backend == "sqlite" else PostgresStore(url)
    await store.open()
    smtp = SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1)
    local = Enforcer(store, SmtpTransport(smtp))
    kit = await make_kit(local)
    token, address = await kit.agent(usdc=100 * USDC)
    to = payee_wallet()
    socks = [tmp_path / "a.sock", tmp_path / "b.sock"]
    procs: list[asyncio.subprocess.Process] = []
    async with JsonRpcServer(solana_rpc_handler(kit.chain)) as node:
        try:
            for sock in socks:
                procs.append(await _start(url, sock, sink, node.url))
            outcomes = await asyncio.gather(
                *(_pay(socks[n % 2], token, to, f"mp{n}") for n in range(PAYMENTS))
            )
        finally:
            for proc in procs:
                proc.kill()
                await proc.wait()
    assert [d.status for d in outcomes] == ["paid_and_sent"] * PAYMENTS, outcomes
    tx_ids = {d.tx_id for d in outcomes}
    assert len(tx_ids) == PAYMENTS and None not in tx_ids
    assert sorted(kit.payment_txs(address)) == sorted(tx_ids)  # exactly one transaction each
    assert kit.usdc_of(to) == PAYMENTS * USDC
    assert kit.usdc_of(address) == (100 - PAYMENTS) * USDC
    rows = await store.execute_sql("SELECT state, tx_id FROM enf_payments", ())
    assert len(rows) == PAYMENTS and {r[0] for r in rows} == {"SENT"}
    await store.close()
