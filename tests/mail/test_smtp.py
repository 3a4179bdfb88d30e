"""SMTP submission against a real aiosmtpd server on loopback, with TLS and AUTH.

The server's certificate is generated per test session with `cryptography`; the
client trusts it through an explicit SSL context (and refuses it without one)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

from envelopay import dkim
from envelopay.errors import ConfigError, UsageError
from envelopay.mail.transport.smtp import SendResult, SmtpConfig, backoff_delays, message_id_of, send_raw
from envelopay.testing.tls import self_signed

USER, PASSWORD = "agent@example.com", "correct horse"


@pytest.fixture(scope="module")
def cert_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    yield self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server_ctx(cert_files: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert_files[0]), str(cert_files[1]))
    return ctx


@pytest.fixture
def client_ctx(cert_files: tuple[Path, Path]) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(cert_files[0]))
    return ctx


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    tls: bool
    user: str | None


@dataclass
class Recorder:
    """aiosmtpd handler: records deliveries; scripted replies to fail the first N tries."""

    received: list[Received] = field(default_factory=list)
    connections: int = 0
    fail_data: list[str] = field(default_factory=list)  # replies for successive DATA
    rcpt_reply: str | None = None
    verdict_delay: float = 0.0  # seconds before the reply to the final dot

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if self.rcpt_reply is not None:
            return self.rcpt_reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        await asyncio.sleep(self.verdict_delay)
        if self.fail_data:
            return self.fail_data.pop(0)
        tls = server.transport.get_extra_info("ssl_object") is not None
        user = session.auth_data.login.decode() if session.auth_data is not None else None
        self.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.original_content, tls, user)
        )
        return "250 2.0.0 queued"


def authenticator(server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
    if isinstance(auth_data, LoginPassword) and (auth_data.login, auth_data.password) == (
        USER.encode(),
        PASSWORD.encode(),
    ):
        return AuthResult(success=True, auth_data=auth_data)
    # handled=False makes aiosmtpd answer 535; the default would leave the client hanging.
    return AuthResult(success=False, handled=False)


@dataclass
class Server:
    port: int
    recorder: Recorder


async def _serve(
    recorder: Recorder, *, starttls_ctx: ssl.SSLContext | None, implicit_ctx: ssl.SSLContext | None
) -> tuple[asyncio.AbstractServer, int]:
    loop = asyncio.get_running_loop()

    def factory() -> SMTP:
        recorder.connections += 1
        return SMTP(
            recorder,
            hostname="mx.test",
            tls_context=starttls_ctx,
            require_starttls=starttls_ctx is not None,
            authenticator=authenticator,
            auth_required=True,
            # implicit TLS: aiosmtpd only knows about STARTTLS, the socket is TLS already
            auth_require_tls=implicit_ctx is None,
            loop=loop,
        )

    srv = await loop.create_server(factory, "127.0.0.1", 0, ssl=implicit_ctx)
    return srv, srv.sockets[0].getsockname()[1]


@pytest.fixture
async def starttls_server(server_ctx: ssl.SSLContext) -> AsyncIterator[Server]:
    rec = Recorder()
    srv, port = await _serve(rec, starttls_ctx=server_ctx, implicit_ctx=None)
    yield Server(port, rec)
    srv.close()
    await srv.wait_closed()


@pytest.fixture
async def tls_server(server_ctx: ssl.SSLContext) -> AsyncIterator[Server]:
    rec = Recorder()
    srv, port = await _serve(rec, starttls_ctx=None, implicit_ctx=server_ctx)
    yield Server(port, rec)
    srv.close()
    await srv.wait_closed()


KEY = dkim.DkimKey.generate_ed25519()


def signed_message(n: int = 1) -> bytes:
    raw = (
        f"From: Agent <{USER}>\r\nTo: worker@example.org\r\nSubject: PAY | #{n}\r\n"
        f"Date: Mon, 30 Nov 2026 10:00:00 +0000\r\nMessage-ID: <m{n}@example.com>\r\n"
        "MIME-Version: 1.0\r\nContent-Type: text/plain\r\n\r\n"
        '.leading dot survives dot-stuffing\r\n{"v": "0.1.0"}\r\n'
    ).encode()
    return dkim.sign(raw, selector="s1", domain="example.com", key=KEY)


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def cfg(port: int, ctx: ssl.SSLContext | None, **kw: Any) -> SmtpConfig:
    base: dict[str, Any] = {
        "host": "127.0.0.1",
        "port": port,
        "security": "starttls",
        "username": USER,
        "password": PASSWORD,
        "tls_context": ctx,
        "timeout": 20.0,
    }
    base.update(kw)
    return SmtpConfig(**base)


async def test_starttls_auth_sends_exact_signed_bytes(
    starttls_server: Server, client_ctx: ssl.SSLContext
) -> None:
    raw = signed_message()
    res = await send_raw(
        raw, sender=USER, recipient="worker@example.org", config=cfg(starttls_server.port, client_ctx)
    )
    assert res == SendResult("sent", "<m1@example.com>", 1, 250, res.detail)
    [got] = starttls_server.recorder.received
    assert got.data == raw  # bytes received == bytes signed (no re-flattening)
    assert got.tls and got.user == USER
    assert got.mail_from == USER and got.rcpt_tos == ["worker@example.org"]
    record = KEY.dns_txt_record()
    verdict = await dkim.verify(got.data, dns=dkim.table_dns({"s1._domainkey.example.com": record}))
    assert verdict.status == "pass" and verdict.aligned


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")
async def test_implicit_tls_auth(tls_server: Server, client_ctx: ssl.SSLContext) -> None:
    raw = signed_message(2)
    res = await send_raw(
        raw,
        sender=USER,
        recipient="worker@example.org",
        config=cfg(tls_server.port, client_ctx, security="tls"),
    )
    assert res.ok and res.message_id == "<m2@example.com>"
    [got] = tls_server.recorder.received
    assert got.data == raw and got.tls and got.user == USER


async def test_bad_password_is_permanent(starttls_server: Server, client_ctx: ssl.SSLContext) -> None:
    sleeps = Sleeps()
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="worker@example.org",
        config=cfg(starttls_server.port, client_ctx, password="wrong"),
        sleep=sleeps,
    )
    assert res.status == "permanent_failure" and res.code == 535 and res.attempts == 1
    assert sleeps.calls == [] and starttls_server.recorder.received == []


async def test_4xx_is_retried_with_backoff_then_delivered(
    starttls_server: Server, client_ctx: ssl.SSLContext
) -> None:
    starttls_server.recorder.fail_data = ["451 4.3.0 try later", "421 4.7.0 busy"]
    sleeps = Sleeps()
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="worker@example.org",
        config=cfg(starttls_server.port, client_ctx, backoff_initial=0.5),
        sleep=sleeps,
    )
    assert res.status == "sent" and res.attempts == 3
    assert sleeps.calls == [0.5, 1.0]
    assert len(starttls_server.recorder.received) == 1  # one transaction per message, delivered once


async def test_4xx_forever_is_a_temporary_failure(
    starttls_server: Server, client_ctx: ssl.SSLContext
) -> None:
    starttls_server.recorder.fail_data = ["452 4.3.1 full"] * 10
    sleeps = Sleeps()
    conf = cfg(starttls_server.port, client_ctx, max_attempts=3, backoff_initial=2, backoff_max=3)
    res = await send_raw(
        signed_message(), sender=USER, recipient="worker@example.org", config=conf, sleep=sleeps
    )
    assert res.status == "temporary_failure" and res.attempts == 3 and res.code == 452
    assert sleeps.calls == [2, 3] == backoff_delays(conf)


async def test_5xx_recipient_is_permanent(starttls_server: Server, client_ctx: ssl.SSLContext) -> None:
    starttls_server.recorder.rcpt_reply = "550 5.1.1 no such user"
    sleeps = Sleeps()
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="nobody@example.org",
        config=cfg(starttls_server.port, client_ctx),
        sleep=sleeps,
    )
    assert res.status == "permanent_failure" and res.code == 550 and res.attempts == 1
    assert res.message_id == "<m1@example.com>" and sleeps.calls == []


async def test_5xx_data_is_permanent(starttls_server: Server, client_ctx: ssl.SSLContext) -> None:
    starttls_server.recorder.fail_data = ["554 5.7.1 rejected"]
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="w@example.org",
        config=cfg(starttls_server.port, client_ctx),
        sleep=Sleeps(),
    )
    assert (res.status, res.code, res.attempts) == ("permanent_failure", 554, 1)


async def test_connection_refused_is_retried_then_temporary(client_ctx: ssl.SSLContext) -> None:
    # A port that was free a moment ago and has no listener now.
    srv = await asyncio.get_running_loop().create_server(asyncio.Protocol, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    srv.close()
    await srv.wait_closed()
    sleeps = Sleeps()
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="w@example.org",
        config=cfg(port, client_ctx, max_attempts=2),
        sleep=sleeps,
    )
    assert res.status == "temporary_failure" and res.attempts == 2 and res.code is None
    assert len(sleeps.calls) == 1


async def test_untrusted_certificate_is_permanent(starttls_server: Server) -> None:
    res = await send_raw(
        signed_message(),
        sender=USER,
        recipient="w@example.org",
        config=cfg(starttls_server.port, ssl.create_default_context()),
        sleep=Sleeps(),
    )
    assert res.status == "permanent_failure" and "certificate" in res.detail.lower()
    assert starttls_server.recorder.received == []


async def test_starttls_required_but_not_offered_is_permanent(client_ctx: ssl.SSLContext) -> None:
    rec = Recorder()
    srv, port = await _serve(rec, starttls_ctx=None, implicit_ctx=None)
    try:
        res = await send_raw(
            signed_message(),
            sender=USER,
            recipient="w@example.org",
            config=cfg(port, client_ctx),
            sleep=Sleeps(),
        )
    finally:
        srv.close()
        await srv.wait_closed()
    assert res.status == "permanent_failure" and "STARTTLS" in res.detail
    assert rec.received == []


@pytest.mark.parametrize(
    "recipient",
    [
        "a@example.org, b@example.org",
        "a@example.org\r\nBcc: x@evil.test",
        " a@example.org",
        "a b@example.org",
        "Name <a@example.org>",
        "a@example.org;b@example.org",
        "",
    ],
)
async def test_bad_recipient_refused_before_any_io(
    starttls_server: Server, client_ctx: ssl.SSLContext, recipient: str
) -> None:
    with pytest.raises(UsageError):
        await send_raw(
            signed_message(), sender=USER, recipient=recipient, config=cfg(starttls_server.port, client_ctx)
        )
    assert starttls_server.recorder.connections == 0


async def test_message_without_message_id_refused_before_io(
    starttls_server: Server, client_ctx: ssl.SSLContext
) -> None:
    with pytest.raises(UsageError):
        await send_raw(
            b"Subject: x\r\n\r\nbody\r\n",
            sender=USER,
            recipient="w@example.org",
            config=cfg(starttls_server.port, client_ctx),
        )
    assert starttls_server.recorder.connections == 0


def test_message_id_extraction() -> None:
    assert message_id_of(b"Message-ID:\r\n <a@b>\r\nSubject: x\r\n\r\nMessage-ID: <body@x>\r\n") == "<a@b>"
    assert message_id_of(b"Message-ID: <a@b>\r\nMessage-Id: <c@d>\r\n\r\n") is None
    assert message_id_of(b"Subject: x\r\n\r\n") is None


def test_config_refusals() -> None:
    with pytest.raises(ConfigError):
        SmtpConfig(host="smtp.example.com", security="plain")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        SmtpConfig(host="smtp.example.com", username="u")
    with pytest.raises(ConfigError):
        SmtpConfig(host="smtp.example.com", security="none", username="u", password="p")
    with pytest.raises(ConfigError):
        SmtpConfig(host="smtp.example.com", max_attempts=0)
    for bad in ({"timeout": 0.0}, {"transaction_timeout": -1.0}, {"transaction_timeout": float("nan")}):
        with pytest.raises(ConfigError, match="positive seconds"):
            SmtpConfig(host="smtp.example.com", **bad)


@pytest.mark.parametrize("transaction_timeout", [240.0, 0.3])
async def test_a_slow_verdict_is_waited_for_and_never_answered_by_a_second_copy(
    starttls_server: Server, client_ctx: ssl.SSLContext, transaction_timeout: float
) -> None:
    """The server takes 0.8 s over its reply to the final dot, longer than `timeout` (it
    may: RFC 5321 §4.5.3.2.6 gives it 10 minutes). Giving up there and retrying delivered
    the message twice. The transaction's own timeout waits for the verdict (240 s); when
    even that runs out (0.3 s), the message may still be accepted after we stopped
    waiting, so the call does not send it again (the outbox retries later: at least once)."""
    starttls_server.recorder.verdict_delay = 0.8
    sleeps = Sleeps()
    res = await send_raw(
        signed_message(7),
        sender=USER,
        recipient="worker@example.org",
        config=cfg(starttls_server.port, client_ctx, timeout=0.2, transaction_timeout=transaction_timeout),
        sleep=sleeps,
    )
    assert res.attempts == 1 and sleeps.calls == [] and starttls_server.recorder.connections == 1
    if transaction_timeout > 1:
        assert res.ok and len(starttls_server.recorder.received) == 1
    else:
        assert res.status == "temporary_failure"
        assert "no reply within 0.3 s in the mail transaction" in res.detail
