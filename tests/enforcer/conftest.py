"""Fixtures for the enforcer tests: both stores, a real aiosmtpd sink, a running service."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP

from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer, hash_token
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.service.server import start_server
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport

OPERATOR = "op-test-token"


@dataclass
class Sink:
    """An aiosmtpd server on loopback that keeps every message it accepts."""

    port: int = 0
    messages: list[tuple[str, list[str], bytes]] = field(default_factory=list)
    fail_with: str | None = None  # e.g. "550 no" to refuse DATA
    fail_next: list[str] = field(default_factory=list)  # one-shot refusals, in order
    peers: set[Any] = field(default_factory=set)  # client (host, port)s seen: one per connection
    pipelining: bool = False  # advertise PIPELINING (RFC 2920) in the EHLO reply
    rcpt_reply: str | None = None  # e.g. "550 no such user" to refuse every RCPT TO
    drop_at_rcpt: int = 0  # drop the connection (no reply) at the next n RCPT TOs
    rcpts: list[str] = field(default_factory=list)  # every RCPT TO seen, refused or not
    live: int = 0  # connections open now
    data_delay: float = 0.0  # seconds before answering the final dot

    async def handle_EHLO(self, server: Any, session: Any, envelope: Any, hostname: str,
                          responses: list[str]) -> list[str]:
        session.host_name = hostname
        if self.pipelining:
            responses.insert(-1, "250-PIPELINING")
        return responses

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str,
                          options: list[str]) -> str:
        self.rcpts.append(address)
        if self.drop_at_rcpt:
            self.drop_at_rcpt -= 1
            server.transport.abort()
            return "250 OK"  # never reaches the client
        if self.rcpt_reply:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.peers.add(session.peer)
        if self.data_delay:
            await asyncio.sleep(self.data_delay)
        if self.fail_next:
            return self.fail_next.pop(0)
        if self.fail_with:
            return self.fail_with
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.content)))
        return "250 OK"


class _CountingSMTP(SMTP):
    def connection_made(self, transport: Any) -> None:
        self.event_handler.live += 1
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.event_handler.live -= 1
        super().connection_lost(exc)


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    s = Sink()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _CountingSMTP(s, decode_data=False), "127.0.0.1", 0)
    s.port = server.sockets[0].getsockname()[1]
    yield s
    server.close()
    await server.wait_closed()


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EnforcerStore]:
    if request.param == "sqlite":
        st: EnforcerStore = SqliteStore(tmp_path / "enf.db")
    else:
        st = PostgresStore(request.getfixturevalue("pg_dsn"), max_size=20)
    await st.open()
    yield st
    await st.close()


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def enforcer(store: EnforcerStore, sink: Sink, clock: Clock) -> AsyncIterator[Enforcer]:
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    yield Enforcer(store, deliverer, operator_token_hash=hash_token(OPERATOR), clock=clock)
    await deliverer.close()


@pytest.fixture
async def service(enforcer: Enforcer) -> AsyncIterator[str]:
    runner, url = await start_server(enforcer)
    yield url
    await runner.cleanup()
