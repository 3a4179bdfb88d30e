"""Where an allowed message goes: SMTP submission (mail.smtp) or the walled garden
(mail.garden). The enforcer is the only holder of these credentials and of the DKIM key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from envelopay.enforcer.send.smtp_pipe import (
    FINAL_REPLY_TIMEOUT,
    OutcomeUnknown,
    ReplyError,
    Session,
    envelope_safe,
    open_session,
)
from envelopay.errors import TransportError, UsageError
from envelopay.mail import garden
from envelopay.mail.transport.lmtp_client import LmtpClient, Refused
from envelopay.mail.transport.smtp import send_raw

if TYPE_CHECKING:
    from envelopay.dkim import DkimKey
    from envelopay.mail.transport.lmtp_client import DeliveryResult, Reply
    from envelopay.mail.transport.smtp import SmtpConfig

__all__ = [
    "Deliverer", "Envelope", "EnvelopeOpener", "GardenDeliverer", "GardenEnvelope", "Signer", "SmtpDeliverer",
    "SmtpEnvelope", "dkim_signer",
]

Signer = Callable[[bytes], bytes]


class Deliverer(Protocol):
    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        """Hand `raw` over for delivery; raise TransportError if it was not accepted."""
        ...


class Envelope(Protocol):
    """One message's transaction opened before its body exists (SmtpDeliverer)."""

    sender: str
    recipient: str

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        """Send `raw` short of its end, so that nothing is delivered yet; "" or why the
        message can never go this way (a permanent refusal)."""
        ...

    async def deliver(self, raw: bytes) -> None:
        """Finish with `raw`; the same contract as Deliverer.deliver. Once only."""
        ...

    def abort(self) -> None:
        """End it with nothing delivered; a no-op after deliver."""
        ...


@runtime_checkable
class EnvelopeOpener(Protocol):
    def open_envelope(self, *, sender: str, recipient: str) -> Envelope | None:
        """Start the transaction for (sender, recipient) now, or None: deliver() it is."""
        ...


@dataclass
class SmtpDeliverer:
    """Submission of the exact (signed) bytes, one recipient, one transaction per message.

    Fast path: a small pool of open connections (a new TCP+EHLO+AUTH per message costs
    more than every policy check together), pipelining MAIL FROM, RCPT TO and DATA when the
    server offers PIPELINING. Any failure on a pooled connection other than a permanent
    5xx refusal falls back to mail.smtp.send_raw on a fresh connection, with its retries
    and backoff; a 5xx is final either way.

    open_envelope starts a message's transaction before its body exists (the PAY, while
    its payment is signed and broadcast: payments_exec.py); `hold` bounds how long such a
    transaction may wait for its body before it is abandoned for a fresh delivery."""

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

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        envelope = self.open_envelope(sender=sender, recipient=recipient)
        if envelope is None:
            await self._send_raw(raw, sender=sender, recipient=recipient)
        else:
            await envelope.deliver(raw)

    async def _send_raw(self, raw: bytes, *, sender: str, recipient: str) -> None:
        try:
            result = await send_raw(
                raw, sender=sender, recipient=recipient, config=self.config, sleep=self.sleep
            )
        except UsageError as exc:
            raise TransportError(f"smtp refused the message before sending: {exc}") from exc
        if not result.ok:
            code = f" {result.code}" if result.code else ""
            raise TransportError(f"smtp {result.status}{code}: {result.detail}")

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for session in idle:
            await session.quit()


class SmtpEnvelope:
    """MAIL FROM, RCPT TO and DATA started at once on a pooled (or new) connection; the
    body (stage) and the final dot (deliver) later.

    Nothing is delivered without the final dot, so abort() (or a crash) leaves nothing at
    the server; an aborted or failed transaction's connection is closed, never pooled.
    Every failure before the server accepted the message — a stale pooled connection, a
    4xx, a dropped connection, a body later than `hold` — falls back to the deliverer's
    fresh-connection path once; a 5xx reply is final, as on any connection."""

    def __init__(self, owner: SmtpDeliverer, sender: str, recipient: str) -> None:
        self.owner, self.sender, self.recipient = owner, sender, recipient
        self._opened = time.monotonic()
        self._done = False
        self._staged: bytes | None = None
        self._fault: BaseException | None = None  # what stage() met; deliver() acts on it
        self._session = owner._pooled()
        if self._session is not None:
            try:  # written now: the server works on them while this task signs and pays
                self._session.start(sender, recipient)
            except OSError:
                self._session.close()
                self._session = None
        # A pooled pipelining connection has nothing left to send before the body: its
        # replies are read in stage() or deliver(). Otherwise a task connects and/or sends
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
        most `wait` s for that; else deliver() writes it all). The server reads the body
        while the caller decides whether it may be delivered: deliver(raw) then writes only
        the final dot. Returns why the message can never go, when the server refused it
        for good (a 5xx to MAIL FROM, RCPT TO or DATA, or at AUTH): the caller can still
        decide not to do what the message reports. Any other fault is kept for deliver(),
        which falls back to a fresh connection."""
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

    async def deliver(self, raw: bytes) -> None:
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
            raise TransportError(f"smtp permanent_failure: {fault}") from fault
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


@dataclass
class GardenDeliverer:
    """LMTP into the walled garden (a Unix socket path or a loopback port).

    auth -- the enforcer's garden credential (user, secret): a garden with accounts
            lets it send only as the addresses its account lists (its agents')."""

    endpoint: str | int | Path
    auth: tuple[str, str] | None = None
    hold: float = 8.0  # s an early transaction may wait for its body (as SmtpDeliverer's)

    def open_envelope(self, *, sender: str, recipient: str) -> GardenEnvelope:
        return GardenEnvelope(self, sender, recipient)

    async def deliver(self, raw: bytes, *, sender: str, recipient: str) -> None:
        try:
            result = await garden.deliver(raw, sender, [recipient], self.endpoint, auth=self.auth)
        except (OSError, TransportError) as exc:
            raise TransportError(f"garden {self.endpoint}: {exc}") from exc
        _require_delivered(result, recipient)


def _require_delivered(result: DeliveryResult, recipient: str) -> None:
    """TransportError with the garden's reply unless `recipient` got the message."""
    if recipient not in result.delivered:
        reply = result.replies.get(recipient)
        raise TransportError(f"garden refused {recipient}: {reply.code if reply else '?'} "
                             f"{reply.text if reply else ''}".strip())


class GardenEnvelope:
    """A PAY's LMTP transaction begun while its payment is signed: connect, AUTH, MAIL and
    RCPT in a task started now; DATA, the body and its final dot in deliver(), once the
    money moved. LMTP delivers nothing before the final dot (RFC 2033 §4.2, as SMTP), so
    abort() (or a crash) leaves nothing in the garden. A 5xx to the greeting, AUTH, MAIL or
    RCPT — an address the garden does not hold, a credential it refuses — is heard in
    stage(), before the broadcast: the caller does not pay (no money without its email),
    as over SMTP (SmtpEnvelope). Any other fault of the early transaction falls back to
    the deliverer's fresh connection."""

    def __init__(self, owner: GardenDeliverer, sender: str, recipient: str) -> None:
        self.owner, self.sender, self.recipient = owner, sender, recipient
        self._client = LmtpClient(owner.endpoint, auth=owner.auth)
        self._task: asyncio.Task[Reply] = asyncio.ensure_future(self._client.open(sender, recipient))
        self._opened = time.monotonic()
        self._done = False

    async def stage(self, raw: bytes, *, wait: float = 1.0) -> str:
        """Nothing of `raw` is written (the garden is local: the body goes at deliver);
        "" or why the PAY can never go this way (a 5xx heard within `wait` s)."""
        if self._done:
            return ""
        done, _ = await asyncio.wait({self._task}, timeout=wait)
        if not done:
            return ""
        refusal = self._refusal()
        if refusal is not None and refusal.code >= 500:
            return f"garden permanent_failure: {refusal.code} {refusal.text}"
        return ""

    def _refusal(self) -> Reply | None:
        """The error reply the finished early transaction met, if any."""
        if self._task.cancelled():
            return None
        exc = self._task.exception()
        if isinstance(exc, Refused):
            return exc.reply
        if exc is None and not self._task.result().ok:
            return self._task.result()
        return None

    async def deliver(self, raw: bytes) -> None:
        if self._done:
            raise RuntimeError("this envelope was already used")
        self._done = True
        try:
            rcpt: Reply | None = await self._task
        except (TransportError, UsageError):
            rcpt = None
        try:
            if rcpt is None or not rcpt.ok or time.monotonic() - self._opened > self.owner.hold:
                raise TransportError("the early transaction is not usable")
            await self._client.data()
        except TransportError as exc:
            # Nothing of the message was written: a 5xx is final, anything else (a 4xx, a
            # dropped or idle-timed-out connection) goes again on a fresh connection.
            self._client.drop()
            refusal = exc.reply if isinstance(exc, Refused) else self._refusal()
            if refusal is not None and refusal.code >= 500:
                why = f"{refusal.code} {refusal.text}"
                raise TransportError(f"garden refused {self.recipient}: {why}") from exc
            await self.owner.deliver(raw, sender=self.sender, recipient=self.recipient)
            return
        try:
            # After the content the garden may have it: no second copy now (the caller's
            # record says not delivered; a retry keeps the Message-ID).
            result = await self._client.content(raw, self.recipient)
        except TransportError as exc:
            raise TransportError(f"garden {self.owner.endpoint}: {exc}") from exc
        finally:
            await self._client.close()
        _require_delivered(result, self.recipient)

    def abort(self) -> None:
        if not self._done:
            self._done = True
            if not self._task.done():
                self._task.cancel()
            else:
                self._refusal()  # retrieved: it is moot now
            self._client.drop()


def dkim_signer(
    key: DkimKey, *, selector: str, domain: str, clock: Callable[[], float] = time.time
) -> Signer:
    """Sign every outgoing message with d=`domain` (mail.dkim: relaxed/relaxed, oversigned)."""
    from envelopay import dkim  # lazy: keeps cryptography off this module's import

    def sign(raw: bytes) -> bytes:
        return dkim.sign(raw, selector=selector, domain=domain, key=key, timestamp=int(clock()))

    return sign
