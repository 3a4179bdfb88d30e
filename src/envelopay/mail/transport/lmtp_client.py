"""The garden's LMTP client (RFC 2033): aiosmtplib cannot speak LMTP (no LHLO) and
smtplib.LMTP handles one recipient per transaction, so this is a small asyncio client
that reads one reply per accepted recipient, and authenticates (AUTH PLAIN, RFC 4954 /
RFC 4616) when given the agent's garden credential.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from envelopay.errors import TransportError, UsageError
from envelopay.mail.addresses import require_address

__all__ = [
    "DeliveryResult", "Endpoint", "LmtpClient", "Refused", "Reply", "deliver", "parse_endpoint", "tcp_port",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.code < 300


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """Per-recipient outcome of one LMTP transaction (RCPT refusal or DATA reply)."""

    replies: dict[str, Reply] = field(default_factory=dict)

    @property
    def delivered(self) -> tuple[str, ...]:
        return tuple(r for r, rep in self.replies.items() if rep.ok)

    @property
    def refused(self) -> tuple[str, ...]:
        return tuple(r for r, rep in self.replies.items() if not rep.ok)


Endpoint = tuple[str, int] | int | str | Path


def tcp_port(text: str) -> int | None:
    """`text` as a TCP port: ASCII digits (str.isdigit() is also true of '²' and '٣'),
    1-65535; else None."""
    if text.isascii() and text.isdigit() and len(text) <= 5 and 0 < int(text) < 65536:
        return int(text)
    return None


def parse_endpoint(text: str) -> Endpoint:
    """A garden endpoint as typed: PORT (loopback), HOST:PORT, or a socket path (any text
    with a '/', or without a numeric port). UsageError for a number that is no port."""
    host, sep, port = text.rpartition(":")
    digits = port if sep and host and "/" not in text else text if not sep else ""
    if not (digits.isascii() and digits.isdigit()):
        return Path(text)
    number = tcp_port(digits)
    if number is None:
        raise UsageError(f"endpoint {text!r}: a port is 1-65535")
    return (host, number) if sep else number


class Refused(TransportError):
    """The server answered a command with an error reply (kept: a 5xx is final, RFC 5321
    §4.2.1, a 4xx may pass later)."""

    def __init__(self, message: str, reply: Reply) -> None:
        super().__init__(message)
        self.reply = reply


class LmtpClient:
    """A minimal LMTP client (RFC 2033) keeping one connection for many transactions."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float = 30.0,
        name: str = "garden-client",
        auth: tuple[str, str] | None = None,
    ) -> None:
        """auth -- (user, secret): the agent's garden credential, sent as AUTH PLAIN
        after LHLO (a garden with accounts refuses MAIL without it)."""
        self.endpoint = endpoint
        self.timeout = timeout
        self.name = name
        self.auth = auth
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pipelining = False  # the server's LHLO answer lists PIPELINING

    async def connect(self) -> None:
        ep = self.endpoint
        try:
            if isinstance(ep, str | Path):
                conn = asyncio.open_unix_connection(str(ep))
            elif isinstance(ep, int):
                conn = asyncio.open_connection("127.0.0.1", ep)
            else:
                conn = asyncio.open_connection(ep[0], ep[1])
            self._reader, self._writer = await asyncio.wait_for(conn, self.timeout)
            await self._expect(await self._reply(), "greeting")
            lhlo = await self._command(f"LHLO {self.name}", "LHLO")
            self._pipelining = "PIPELINING" in (ext.split(" ", 1)[0].upper() for ext in lhlo.text.split("\n"))
            if self.auth is not None:
                user, secret = self.auth
                token = base64.b64encode(f"\0{user}\0{secret}".encode()).decode("ascii")
                await self._command(f"AUTH PLAIN {token}", "AUTH")
        except TransportError:
            await self.close()
            raise
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            await self.close()
            raise TransportError(f"LMTP connect to {ep}: {exc!r}") from exc

    async def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.write(b"QUIT\r\n")
                await asyncio.wait_for(self._writer.drain(), 2)
            self._writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._writer.wait_closed(), 2)
        self._reader = self._writer = None

    async def __aenter__(self) -> LmtpClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, raw: bytes, sender: str, recipients: Sequence[str]) -> DeliveryResult:
        """One transaction: MAIL, one RCPT per recipient, DATA, one reply per accepted one."""
        env_from, rcpts = _envelope(sender, recipients)
        if self._writer is None:
            await self.connect()
        return await self._closing_on_fault(self._transaction(raw, env_from, rcpts))

    async def _closing_on_fault(self, step: Awaitable[T]) -> T:
        """`step`, with the connection closed if it fails (its state is unknown then)."""
        try:
            return await step
        except TransportError:
            await self.close()
            raise
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            await self.close()
            raise TransportError(f"LMTP transaction broke: {exc!r}") from exc

    async def open(self, sender: str, recipient: str) -> Reply:
        """MAIL and RCPT of a one-recipient transaction whose content comes later (`data`,
        then `content`); nothing is delivered before content's final dot, so closing
        instead leaves nothing.
        Returns the RCPT reply; a refused greeting, LHLO, AUTH or MAIL raises Refused."""
        env_from, rcpts = _envelope(sender, [recipient])
        if self._writer is None:
            await self.connect()
        await self._closing_on_fault(self._command(f"MAIL FROM:<{env_from}>", "MAIL"))
        return await self._closing_on_fault(self._send_line(f"RCPT TO:<{rcpts[0]}>"))

    async def data(self) -> None:
        """DATA of the transaction `open` began; nothing of the message is written yet."""
        rep = await self._closing_on_fault(self._send_line("DATA"))
        if rep.code != 354:
            await self.close()
            raise Refused(f"LMTP DATA refused: {rep.code} {rep.text}", rep)

    async def content(self, raw: bytes, recipient: str) -> DeliveryResult:
        """The message and its final dot, after `data`: the reply for `recipient`."""
        return await self._closing_on_fault(self._content(raw, [recipient], {}))

    def drop(self) -> None:
        """End the connection at once, mid-transaction included: nothing more is written."""
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def _transaction(self, raw: bytes, sender: str, rcpts: list[str]) -> DeliveryResult:
        if self._pipelining:
            return await self._pipelined(raw, sender, rcpts)
        await self._command(f"MAIL FROM:<{sender}>", "MAIL")
        replies: dict[str, Reply] = {}
        accepted: list[str] = []
        for r in rcpts:
            rep = await self._send_line(f"RCPT TO:<{r}>")
            replies[r] = rep
            if rep.ok:
                accepted.append(r)
        if not accepted:
            await self._command("RSET", "RSET")
            return DeliveryResult(replies)
        rep = await self._send_line("DATA")
        if rep.code != 354:
            raise TransportError(f"LMTP DATA refused: {rep.code} {rep.text}")
        return await self._content(raw, accepted, replies)

    async def _pipelined(self, raw: bytes, sender: str, rcpts: list[str]) -> DeliveryResult:
        """MAIL, every RCPT and DATA in one write (RFC 2920), then their replies in order;
        the content goes only after 354, as without pipelining."""
        assert self._writer is not None
        lines = [f"MAIL FROM:<{sender}>", *(f"RCPT TO:<{r}>" for r in rcpts), "DATA"]
        self._writer.write("".join(line + "\r\n" for line in lines).encode("ascii"))
        mail = await self._reply()
        replies: dict[str, Reply] = {}
        accepted: list[str] = []
        for r in rcpts:
            rep = await self._reply()
            replies[r] = rep
            if rep.ok:
                accepted.append(r)
        data = await self._reply()
        await self._expect(mail, "MAIL")
        if not accepted:
            if data.code == 354:  # a server that took DATA with no recipient: start afresh
                await self.close()
                return DeliveryResult(replies)
            await self._command("RSET", "RSET")
            return DeliveryResult(replies)
        if data.code != 354:
            raise TransportError(f"LMTP DATA refused: {data.code} {data.text}")
        return await self._content(raw, accepted, replies)

    async def _content(self, raw: bytes, accepted: list[str], replies: dict[str, Reply]) -> DeliveryResult:
        assert self._writer is not None
        self._writer.write(_dot_stuff(raw))
        first = await self._reply()
        replies[accepted[0]] = first
        for r in accepted[1:]:
            if first.ok:
                replies[r] = await self._reply()
                continue
            # Some servers (aiosmtpd's own size check among them) answer a refused DATA
            # once, not once per recipient: wait briefly, then apply that reply to all.
            try:
                replies[r] = await self._reply(timeout=min(self.timeout, 2.0))
            except TimeoutError:
                for rest in accepted[accepted.index(r) :]:
                    replies[rest] = first
                await self.close()
                break
        return DeliveryResult(replies)

    async def _send_line(self, line: str) -> Reply:
        assert self._writer is not None
        self._writer.write(line.encode("ascii") + b"\r\n")
        return await self._reply()

    async def _command(self, line: str, what: str) -> Reply:
        return await self._expect(await self._send_line(line), what)

    async def _expect(self, rep: Reply, what: str) -> Reply:
        if not rep.ok:
            raise Refused(f"LMTP {what} refused: {rep.code} {rep.text}", rep)
        return rep

    async def _reply(self, timeout: float | None = None) -> Reply:
        """Read one (possibly multi-line) reply."""
        assert self._reader is not None
        texts: list[str] = []
        while True:
            async with asyncio.timeout(timeout or self.timeout):  # no task per line, unlike wait_for
                line = await self._reader.readline()
            if not line:
                raise asyncio.IncompleteReadError(b"", None)
            text = line.decode("utf-8", "replace").rstrip("\r\n")
            if len(text) < 3 or not (text[:3].isascii() and text[:3].isdigit()):
                raise TransportError(f"LMTP: malformed reply line {text[:80]!r}")
            texts.append(text[4:])
            if len(text) == 3 or text[3] == " ":
                return Reply(int(text[:3]), "\n".join(texts))


def _envelope(sender: str, recipients: Sequence[str]) -> tuple[str, list[str]]:
    """Validated envelope addresses (UsageError before any I/O); "" is the null sender."""
    env_from = "" if sender in ("", "<>") else require_address(sender, field="sender")
    rcpts = [require_address(r, field="recipient") for r in recipients]
    if not rcpts:
        raise UsageError("recipient: at least one is needed")
    return env_from, rcpts


def _dot_stuff(raw: bytes) -> bytes:
    """CRLF line endings, leading dots doubled, and the terminating '.'."""
    data = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if data.startswith(b"."):
        data = b"." + data
    data = data.replace(b"\r\n.", b"\r\n..")
    if not data.endswith(b"\r\n"):
        data += b"\r\n"
    return data + b".\r\n"


async def deliver(
    raw: bytes,
    sender: str,
    recipients: Sequence[str],
    endpoint: Endpoint,
    *,
    timeout: float = 30.0,
    auth: tuple[str, str] | None = None,
) -> DeliveryResult:
    """Deliver one message over LMTP on a fresh connection (authenticated when `auth`)."""
    _envelope(sender, recipients)
    async with LmtpClient(endpoint, timeout=timeout, auth=auth) as client:
        return await client.send(raw, sender, recipients)
