"""SMTP submission of already signed messages (aiosmtplib).

One message per transaction, one envelope recipient, the raw signed bytes handed to
`sendmail` (never `send_message`: it re-flattens and can change what was signed).
Temporary failures (4xx replies, connection faults, timeouts) are retried with
exponential backoff, except a timeout inside the mail transaction, which may come after
the server took the message (SmtpConfig.transaction_timeout); a 5xx reply is a
permanent failure. Every outcome is a
`SendResult` value; only a caller's own mistake (invalid address, no Message-ID)
raises, and it does so before any I/O.
"""

from __future__ import annotations

import asyncio
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from envelopay.errors import ConfigError, UsageError
from envelopay.mail.addresses import require_address

Security = Literal["starttls", "tls", "none"]


@dataclass(frozen=True, slots=True)
class SmtpConfig:
    """Where and how to submit.

    security -- "starttls" (port 587; STARTTLS required), "tls" (implicit TLS, 465),
                "none" (plain; loopback relays and tests only)
    tls_context -- a custom context (e.g. trusting a test CA); default: system trust
    max_attempts -- total tries for temporary failures; backoff doubles from
                backoff_initial up to backoff_max seconds
    timeout -- connecting, the greeting, EHLO, STARTTLS and AUTH
    transaction_timeout -- MAIL, RCPT, DATA and the verdict on the message. A server
                may be slow there (RFC 5321 §4.5.3.2 allows 5 minutes for MAIL and RCPT
                and 10 for the reply to the final dot): giving up early resends a message
                the server may go on to accept, so the recipient gets it twice. 4 minutes
                by default: the wait stays inside the outbox's 5-minute claim lease, so
                no other drainer takes the row meanwhile. A timeout there is not retried
                within the call (the outbox retries it later, with its backoff)
    """

    host: str
    port: int = 587
    security: Security = "starttls"
    username: str | None = None
    password: str | None = None
    timeout: float = 30.0
    tls_context: ssl.SSLContext | None = None
    local_hostname: str = "localhost"
    max_attempts: int = 4
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    transaction_timeout: float = 240.0

    def __post_init__(self) -> None:
        if self.security not in ("starttls", "tls", "none"):
            raise ConfigError(f"smtp security must be starttls, tls or none, not {self.security!r}")
        if self.max_attempts < 1:
            raise ConfigError("smtp max_attempts must be at least 1")
        if not (self.timeout > 0 and self.transaction_timeout > 0):
            raise ConfigError("smtp timeout and transaction_timeout must be positive seconds")
        if (self.username is None) != (self.password is None):
            raise ConfigError("smtp username and password go together")
        if self.username is not None and self.security == "none" and self.host not in ("127.0.0.1", "::1"):
            raise ConfigError("refusing to send SMTP AUTH credentials without TLS")


SendStatus = Literal["sent", "temporary_failure", "permanent_failure"]


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of one submission.

    status -- sent; temporary_failure (retries exhausted; may be retried later);
              permanent_failure (the server refused for good: do not resend as is)
    message_id -- the Message-ID of the submitted message (always the one in `raw`)
    code -- the last SMTP reply code, when there was one
    """

    status: SendStatus
    message_id: str
    attempts: int
    code: int | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "sent"


_MESSAGE_ID = re.compile(rb"^message-id[ \t]*:[ \t]*(.*(?:\r?\n[ \t].*)*)", re.IGNORECASE | re.MULTILINE)


def message_id_of(raw: bytes) -> str | None:
    """The Message-ID header's value (unfolded), if the header block has exactly one."""
    head = re.split(rb"\r?\n\r?\n", raw, maxsplit=1)[0]
    found = _MESSAGE_ID.findall(head)
    if len(found) != 1:
        return None
    value = re.sub(rb"\s+", b"", found[0]).decode("ascii", "replace")
    return value or None


def backoff_delays(config: SmtpConfig) -> list[float]:
    """The waits between attempts: initial, doubled each time, capped."""
    return [
        min(config.backoff_initial * (2**i), config.backoff_max) for i in range(config.max_attempts - 1)
    ]


@dataclass(frozen=True, slots=True)
class _Attempt:
    status: SendStatus
    code: int | None
    detail: str
    again: bool = True  # a temporary failure worth another attempt within this call


def _classify(exc: BaseException) -> _Attempt:
    import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [r.code for r in exc.recipients]
        code = codes[0] if codes else None
        perm = bool(codes) and all(c >= 500 for c in codes)
        return _Attempt("permanent_failure" if perm else "temporary_failure", code, str(exc))
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        code = exc.code
        if 400 <= code < 500:
            return _Attempt("temporary_failure", code, exc.message)
        if code >= 500:
            return _Attempt("permanent_failure", code, exc.message)
        return _Attempt("temporary_failure", code, exc.message)
    if isinstance(exc, ssl.SSLCertVerificationError):
        # A certificate we do not trust will not become trusted by retrying.
        return _Attempt("permanent_failure", None, f"TLS certificate: {exc}")
    transient = (
        aiosmtplib.SMTPServerDisconnected,
        aiosmtplib.SMTPConnectError,
        aiosmtplib.SMTPTimeoutError,
        OSError,
        TimeoutError,
    )
    if isinstance(exc, transient):
        return _Attempt("temporary_failure", None, f"{type(exc).__name__}: {exc}")
    # What remains is a capability mismatch (no STARTTLS, no AUTH): retrying won't help.
    return _Attempt("permanent_failure", None, f"{type(exc).__name__}: {exc}")


async def _attempt(raw: bytes, sender: str, recipient: str, config: SmtpConfig) -> _Attempt:
    import aiosmtplib  # lazy: keeps aiosmtplib off this module's import

    client = aiosmtplib.SMTP(
        hostname=config.host,
        port=config.port,
        use_tls=config.security == "tls",
        start_tls=config.security == "starttls",
        tls_context=config.tls_context,
        timeout=config.timeout,
        local_hostname=config.local_hostname,
    )
    in_transaction = False
    try:
        await client.connect()
        if config.username is not None and config.password is not None:
            await client.login(config.username, config.password)
        # The transaction's own (longer) timeout: see SmtpConfig.transaction_timeout.
        timeout = max(config.timeout, config.transaction_timeout)
        in_transaction = True
        _errors, reply = await client.sendmail(sender, [recipient], raw, timeout=timeout)
        return _Attempt("sent", 250, reply)
    except (aiosmtplib.SMTPTimeoutError, TimeoutError) as exc:
        if in_transaction:  # perhaps after the final dot: the message may be delivered yet
            detail = f"no reply within {timeout:g} s in the mail transaction: {exc}"
            return _Attempt("temporary_failure", None, detail, again=False)
        return _classify(exc)
    except (aiosmtplib.SMTPException, OSError) as exc:
        return _classify(exc)
    finally:
        if client.is_connected:
            try:
                await client.quit()
            except (aiosmtplib.SMTPException, OSError, TimeoutError):
                client.close()


async def send_raw(
    raw: bytes,
    *,
    sender: str,
    recipient: str,
    config: SmtpConfig,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> SendResult:
    """Submit `raw` (already signed) to one recipient; retry temporary failures.

    `sleep` is injected so tests and callers control the backoff clock."""
    env_from = require_address(sender, field="sender")
    env_to = require_address(recipient, field="recipient")
    message_id = message_id_of(raw)
    if message_id is None:
        raise UsageError("message: exactly one Message-ID header is required before sending")
    delays = backoff_delays(config)
    last = _Attempt("temporary_failure", None, "not attempted")
    for attempt in range(1, config.max_attempts + 1):
        last = await _attempt(raw, env_from, env_to, config)
        if last.status != "temporary_failure" or not last.again or attempt == config.max_attempts:
            return SendResult(last.status, message_id, attempt, last.code, last.detail)
        await sleep(delays[attempt - 1])
    return SendResult(last.status, message_id, config.max_attempts, last.code, last.detail)
