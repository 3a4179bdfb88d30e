"""One pooled SMTP connection that can pipeline (RFC 2920) and hold a transaction open.

aiosmtplib opens the connection (TLS, STARTTLS, EHLO, AUTH); then this module reads the
replies itself, because aiosmtplib's protocol keeps one reply per awaited command and
drops what arrives ahead of it, so it cannot pipeline. The transaction is split in two:
`begin` writes MAIL FROM, RCPT TO and DATA (in one write when the server advertises
PIPELINING) and checks their replies; `finish` writes the message and the final dot and
reads the verdict, or, split, `stage` writes the message and `end` the final dot. Until
the final dot is written, nothing is delivered (RFC 5321 §4.1.1.4): a transaction
abandoned after DATA is ended by closing the connection, never by writing anything else
into it (RSET there would be message text). Once the dot is written, a missing verdict is
an unknown outcome (OutcomeUnknown), not a failure to retry.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FINAL_REPLY_TIMEOUT", "OutcomeUnknown", "ReplyError", "Session", "data_block", "envelope_safe",
           "open_session"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_LEADING_DOT = re.compile(rb"^\.", re.MULTILINE)
# The envelope addresses go into command lines: plain ASCII addresses only (anything
# else — SMTPUTF8, a quote, a bracket, a control character — takes aiosmtplib's path).
_SAFE_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9.-]+")
_MAX_REPLY = 64 * 1024


# RFC 5321 §4.5.3.2.6: "DATA Termination: 10 minutes" for the reply to the final dot
# (a server may run content filters and milters before it answers).
FINAL_REPLY_TIMEOUT = 600.0


class OutcomeUnknown(Exception):
    """The final dot was written and no verdict came back: the server may have taken the
    message, so sending it again could deliver it twice (RFC 1047)."""


class ReplyError(Exception):
    """The server answered a command of the transaction with something other than success."""

    def __init__(self, code: int, text: str, stage: str) -> None:
        super().__init__(f"{stage}: {code} {text}")
        self.code, self.text, self.stage = code, text, stage


def envelope_safe(address: str) -> bool:
    return len(address) <= 254 and _SAFE_ADDRESS.fullmatch(address) is not None


_END_OF_DATA = b".\r\n"


def data_block(raw: bytes) -> bytes:
    """`raw` as the DATA phase carries it: CRLF line ends, leading dots doubled, and the
    terminating CRLF.CRLF (the same transformation aiosmtplib applies)."""
    return _data_text(raw) + _END_OF_DATA


def _data_text(raw: bytes) -> bytes:
    """The DATA phase without its final dot: every line CRLF-ended and dot-stuffed, so
    nothing in it can end the data early."""
    text = _LINE_END.sub(b"\r\n", raw)
    if not text.endswith(b"\r\n"):
        text += b"\r\n"
    return _LEADING_DOT.sub(b"..", text)


class _Replies(asyncio.Protocol):
    """Every byte the server sends, kept until read: pipelined replies are never lost."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.lost: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._wake()

    def eof_received(self) -> bool:
        self._gone(ConnectionResetError("the server closed the connection"))
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._gone(exc or ConnectionResetError("connection lost"))

    def _gone(self, exc: BaseException) -> None:
        if self.lost is None:
            self.lost = exc
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self) -> tuple[int, str] | None:
        """One complete (possibly multi-line) reply off the buffer, if there is one."""
        offset, lines = 0, []
        while True:
            end = self.buffer.find(b"\n", offset)
            if end < 0:
                if len(self.buffer) > _MAX_REPLY:
                    raise ConnectionError("reply too long")
                return None
            line = bytes(self.buffer[offset:end]).rstrip(b"\r")
            offset = end + 1
            if len(line) < 3 or not line[:3].isdigit():
                raise ConnectionError(f"malformed reply line {line[:80]!r}")
            lines.append(line[4:].decode("utf-8", "replace"))
            if line[3:4] != b"-":
                del self.buffer[:offset]
                return int(line[:3]), "\n".join(lines)

    async def reply(self, timeout: float) -> tuple[int, str]:
        async with asyncio.timeout(timeout):
            while True:
                got = self._take()
                if got is not None:
                    return got
                if self.lost is not None:
                    raise ConnectionResetError(f"connection lost: {self.lost}")
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None


@dataclass
class Session:
    """An authenticated connection between transactions, speaking through `_Replies`."""

    transport: asyncio.Transport
    pipelining: bool
    timeout: float
    final_timeout: float = FINAL_REPLY_TIMEOUT  # for the verdict on the message only
    _replies: _Replies = field(default_factory=_Replies)
    _commands: list[tuple[str, bytes, tuple[int, ...]]] = field(default_factory=list)
    _written: int = 0

    @property
    def usable(self) -> bool:
        return self._replies.lost is None and not self.transport.is_closing() and not self._replies.buffer

    def close(self) -> None:
        self.transport.close()

    def start(self, sender: str, recipient: str) -> None:
        """Write what can go now, with no await: the whole group MAIL FROM, RCPT TO, DATA
        when the server pipelines (RFC 2920: DATA may end a group), else MAIL FROM."""
        self._commands = [
            ("MAIL", f"MAIL FROM:<{sender}>\r\n".encode(), (250,)),
            ("RCPT", f"RCPT TO:<{recipient}>\r\n".encode(), (250, 251)),
            ("DATA", b"DATA\r\n", (354,)),
        ]
        group = self._commands if self.pipelining else self._commands[:1]
        self.write(b"".join(command for _, command, _ in group))
        self._written = len(group)

    async def begin(self) -> None:
        """The replies to what `start` wrote (and the rest of the commands, one at a time,
        without PIPELINING); returns once the server said 354. Raises ReplyError at the
        first refusal (the session is then closed by the caller), OSError/TimeoutError for a
        connection fault."""
        for n, (stage, command, ok) in enumerate(self._commands):
            if n >= self._written:
                self.write(command)
                self._written += 1
            code, text = await self._replies.reply(self.timeout)
            if code not in ok:
                raise ReplyError(code, text, stage)

    async def finish(self, raw: bytes) -> None:
        """The message and the final dot, after a successful `begin`."""
        self.stage(raw)
        await self.end()

    def stage(self, raw: bytes) -> None:
        """The message without its final dot, after a successful `begin`: the server reads
        it while the caller still decides whether it may be delivered (`end`) or not (close)."""
        self.write(_data_text(raw))

    async def end(self) -> None:
        """The final dot after `stage`, and the server's verdict on the message. Raises
        OutcomeUnknown when the verdict does not come (no reply in time, the connection
        lost): whether the server has the message is then not known."""
        self.write(_END_OF_DATA)
        try:
            code, text = await self._replies.reply(max(self.timeout, self.final_timeout))
        except (OSError, TimeoutError) as exc:
            raise OutcomeUnknown(f"no reply to the final dot: {exc!r}") from exc
        if code != 250:
            raise ReplyError(code, text, "message")

    async def quit(self) -> None:
        try:
            self.write(b"QUIT\r\n")
            await self._replies.reply(min(self.timeout, 5.0))
        except (OSError, TimeoutError):
            pass
        finally:
            self.close()

    def write(self, data: bytes) -> None:
        if self._replies.lost is not None or self.transport.is_closing():
            raise ConnectionResetError("connection lost")
        self.transport.write(data)


def open_session(client: Any, timeout: float, final_timeout: float = FINAL_REPLY_TIMEOUT) -> Session:
    """Take over the transport of a connected (and logged in) aiosmtplib client."""
    transport = client.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("connection lost before use")
    session = Session(transport, client.supports_extension("pipelining"), timeout, final_timeout)
    transport.set_protocol(session._replies)
    return session
