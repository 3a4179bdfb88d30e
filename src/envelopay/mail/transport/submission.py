"""SMTP submission as a Transport (envelopay.mail.transport): `SmtpTransport`, a small pool
of pipelining connections, and `SmtpEnvelope`, a message's transaction opened before its
body exists. The one-shot path with retries is `smtp.send_raw`; the pipelined session
`smtp_pipe`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from envelopay.errors import TransportError, UsageError
from envelopay.mail.transport import DeliveryRefused
from envelopay.mail.transport.smtp import SmtpConfig, send_raw
from envelopay.mail.transport.smtp_pipe import (
    FINAL_REPLY_TIMEOUT,
    OutcomeUnknown,
    ReplyError,
    Session,
    envelope_safe,
    open_session,
)

__all__ = ["SmtpEnvelope", "SmtpTransport"]


@dataclass
class SmtpTransport:
    """SMTP submission of the exact (signed) bytes as a Transport: one recipient, one
    transaction per message.

    Fast path: a small pool of open connections (a new TCP+EHLO+AUTH per message costs
    more than every policy check together), pipelining MAIL FROM, RCPT TO and DATA when the
    server offers PIPELINING. Any failure on a pooled connection other than a permanent
    5xx refusal falls back to mail.smtp.send_raw on a fresh connection, with its retries
    and backoff; a 5xx is final either way.

    open_envelope starts a message's transaction before its body exists (the enforcer's
    PAY, while its payment is signed and broadcast); `hold` bounds how long such a
    transaction may wait for its body before it is abandoned for a fresh delivery.
    `pool_size=0` keeps no connection: every message goes through `send_raw` on a fresh
    one, with its retries (the outbox drainer's way: it retries a row itself)."""

    config: SmtpConfig
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep)
    pool_size: int = 8
    # Servers drop a connection that stays silent: RFC 5321 asks for at least 5 minutes,
    # Postfix under stress allows 10 s. A body later than this goes the fresh way instead of
    # into a connection the server may have given up (the abandoned one delivers nothing).
    hold: float = 8.0
    # How long the verdict on a message (the reply to its final dot) may take; none in time
    # is an unknown outcome, never sent again here (it could be delivered twice).
    final_timeout: float = FINAL_REPLY_TIMEOUT
    _idle: list[Session] = field(default_factory=list, init=False, repr=False)

    async def _connect(self) -> Session:
        import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

        c = self.config
        client = aiosmtplib.SMTP(
            hostname=c.host, port=c.port, use_tls=c.security == "tls", start_tls=c.security == "starttls",
            tls_context=c.tls_context, timeout=c.timeout, local_hostname=c.local_hostname,
        )
        try:
            await client.connect()
            if client.is_ehlo_or_helo_needed:  # STARTTLS and login said EHLO already
                try:
                    await client.ehlo()
                except aiosmtplib.SMTPHeloError:
                    await client.helo()
            if c.username is not None and c.password is not None:
                await client.login(c.username, c.password)
            return open_session(client, c.timeout, self.final_timeout)
        except BaseException:  # a failure or a cancelled envelope: no half-open socket left
            client.close()
            raise

    def _pooled(self) -> Session | None:
        while self._idle:
            session = self._idle.pop()
            if session.usable:
                return session
            session.close()
        return None

    async def _release(self, session: Session) -> None:
        if len(self._idle) < self.pool_size and session.usable:
            self._idle.append(session)
        else:
            await session.quit()

    def open_envelope(self, *, sender: str, recipient: str) -> SmtpEnvelope | None:
        if self.pool_size <= 0 or not (envelope_safe(sender) and envelope_safe(recipient)):
            return None  # aiosmtplib's path (quoting, SMTPUTF8) on a fresh connection
        return SmtpEnvelope(self, sender, recipient)

    async def send(self, raw: bytes, sender: str, recipient: str) -> None:
        envelope = self.open_envelope(sender=sender, recipient=recipient)
        if envelope is None:
            await self._send_raw(raw, sender=sender, recipient=recipient)
        else:
            await envelope.send_body(raw)

    async def _send_raw(self, raw: bytes, *, sender: str, recipient: str) -> None:
        try:
            result = await send_raw(
                raw, sender=sender, recipient=recipient, config=self.config, sleep=self.sleep
            )
        except UsageError as exc:
            raise DeliveryRefused(f"smtp refused the message before sending: {exc}") from exc
        if not result.ok:
            code = f" {result.code}" if result.code else ""
            why = f"smtp {result.status}{code}: {result.detail}"
            raise DeliveryRefused(why) if result.status == "permanent_failure" else TransportError(why)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for session in idle:
            await session.quit()


class SmtpEnvelope:
    """MAIL FROM, RCPT TO and DATA started at once on a pooled (or new) connection; the
    body (stage) and the final dot (send_body) later.

    Nothing is delivered without the final dot, so abort() (or a crash) leaves nothing at
    the server; an aborted or failed transaction's connection is closed, never pooled.
    Every failure before the server accepted the message — a stale pooled connection, a
    4xx, a dropped connection, a body later than `hold` — falls back to the transport's
    fresh-connection path once; a 5xx reply is final, as on any connection."""

    def __init__(self, owner: SmtpTransport, sender: str, recipient: str) -> None:
        self.owner, self.sender, self.recipient = owner, sender, recipient
        self._opened = time.monotonic()
        self._done = False
        self._staged: bytes | None = None
        self._fault: BaseException | None = None  # what stage() met; send_body() acts on it
        self._session = owner._pooled()
        if self._session is not None:
            try:  # written now: the server works on them while this task signs and pays
                self._session.start(sender, recipient)
            except OSError:
                self._session.close()
                self._session = None
        # A pooled pipelining connection has nothing left to send before the body: its
        # replies are read in stage() or send_body(). Otherwise a task connects and/or sends
        # the commands one at a time while the payment runs.
        self._task: asyncio.Task[Session] | None = None
        if self._session is None or not self._session.pipelining:
            self._task = asyncio.ensure_future(self._begin())

    async def _begin(self) -> Session:
        if self._session is None:
            self._session = await self.owner._connect()
            self._session.start(self.sender, self.recipient)
        await self._session.begin()
        return self._session

    def _in_time(self) -> bool:
        return time.monotonic() - self._opened <= self.owner.hold

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        """Write `raw` without its final dot, once the server said 354 to DATA (waiting at
        most `wait` s for that; else send_body() writes it all). The server reads the body
        while the caller decides whether it may be delivered: send_body(raw) then writes only
        the final dot. Returns why the message can never go, when the server refused it
        for good (a 5xx to MAIL FROM, RCPT TO or DATA, or at AUTH): the caller can still
        decide not to do what the message reports. Any other fault is kept for send_body(),
        which falls back to send_body's fresh connection."""
        import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

        if self._done or self._staged is not None or self._fault is not None or not self._in_time():
            return ""
        task = self._task
        if task is None:
            task = self._task = asyncio.ensure_future(self._begin())
        done, _ = await asyncio.wait({task}, timeout=wait)
        if not done:
            return ""
        try:
            task.result().stage(raw)
        except (ReplyError, OSError, TimeoutError, aiosmtplib.SMTPException) as exc:
            self._drop()
            self._fault = exc
            return f"smtp permanent_failure: {exc}" if _final(exc) else ""
        except BaseException:
            self._drop()
            raise
        self._staged = raw
        return ""

    async def send_body(self, raw: bytes) -> None:
        import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

        if self._done:
            raise RuntimeError("this envelope was already used")
        self._done = True
        fault = self._fault
        if fault is None and self._in_time() and self._staged in (None, raw):
            try:
                session = await (self._task or self._begin())
                if self._staged is None:
                    await session.finish(raw)
                else:
                    await session.end()
            except OutcomeUnknown as exc:
                # After the final dot: the server may have it. A second copy on a fresh
                # connection could be a duplicate, so the caller is told instead (its
                # record says not delivered; a retry keeps the Message-ID).
                self._drop()
                raise TransportError(f"smtp outcome unknown after the final dot: {exc}") from exc
            except (ReplyError, OSError, TimeoutError, aiosmtplib.SMTPException) as exc:
                self._drop()
                fault = exc
            except BaseException:  # cancelled mid-transaction: the connection is not reused
                self._drop()
                raise
            else:
                self._session = None
                await self.owner._release(session)
                return
        else:
            self._drop()  # too late, or other bytes than the staged ones: those stay undelivered
        if fault is not None and _final(fault):  # e.g. 550 at RCPT, 535 at AUTH
            raise DeliveryRefused(f"smtp permanent_failure: {fault}") from fault
        await self.owner._send_raw(raw, sender=self.sender, recipient=self.recipient)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            self._drop()

    def _drop(self) -> None:
        if self._task is None:
            pass
        elif self._task.done():
            if not self._task.cancelled():
                self._task.exception()  # retrieved: it was handled (or is moot) here
        else:
            self._task.cancel()
        if self._session is not None:
            self._session.close()  # mid-transaction: closing is the only safe end
            self._session = None


def _final(exc: BaseException) -> bool:
    """A refusal no other connection would change: a 5xx reply."""
    if isinstance(exc, ReplyError):
        return exc.code >= 500
    return _permanent(exc)


def _permanent(exc: BaseException) -> bool:
    import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        return bool(exc.recipients) and all(r.code >= 500 for r in exc.recipients)
    return isinstance(exc, aiosmtplib.SMTPResponseException) and exc.code >= 500
