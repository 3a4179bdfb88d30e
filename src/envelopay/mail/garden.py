"""The walled garden: endpoint mailboxes reachable only from inside.

The seed (email-as-tool-endpoints) asks for the garden to be "enforced at the transport
layer (LMTP/Maildir, no public MX), not by obscurity of the address". So:

- `GardenServer` speaks LMTP (aiosmtpd) on a loopback address or a Unix socket only;
  a connection from any other peer gets 421 and is closed;
- a recipient outside the garden's address list is refused at RCPT (550 5.1.1);
- after DATA it answers once per accepted recipient (RFC 2033 4.2; aiosmtpd's LMTP
  sends a single reply by itself), each reply given only after that recipient's copy
  is safely in its Maildir's new/ (see envelopay.mail.maildir for the layout).

`LmtpClient` / `deliver()` is the sending side: aiosmtplib cannot speak LMTP (no LHLO)
and smtplib.LMTP handles one recipient per transaction, so this is a small asyncio
client that reads one reply per accepted recipient.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError, TransportError, UsageError
from envelopay.mail.addresses import Address, parse_address, require_address
from envelopay.mail.maildir import deliver_file, ensure_maildir, mailbox_path

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


def peer_allowed(peer: Any) -> bool:
    """True for a Unix-socket peer or a loopback IP; False for anything else."""
    if peer is None or peer == "" or isinstance(peer, str | bytes):
        return True  # AF_UNIX peers have no address (or a path)
    if isinstance(peer, tuple) and peer:
        try:
            ip = ipaddress.ip_address(str(peer[0]).split("%")[0])
        except ValueError:
            return False
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            return ip.ipv4_mapped.is_loopback
        return ip.is_loopback
    return False


def _bare(addr: str) -> Address | None:
    parsed = parse_address(addr.strip("<>"))
    return parsed if isinstance(parsed, Address) else None


@dataclass
class GardenStats:
    connections: int = 0
    refused_peers: int = 0
    accepted_rcpts: int = 0
    refused_rcpts: int = 0
    delivered: int = 0
    failed: int = 0


class _GardenHandler:
    """aiosmtpd handler hooks: RCPT membership and per-recipient Maildir delivery."""

    def __init__(self, server: GardenServer) -> None:
        self._server = server

    async def handle_MAIL(
        self, server: Any, session: Any, envelope: Any, address: str, mail_options: list[str]
    ) -> str:
        if address not in ("", "<>") and _bare(address) is None:
            return "553 5.1.7 sender address refused: not exactly one valid address"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 Ok"

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        parsed = _bare(address)
        if parsed is None or parsed.addr.lower() not in self._server.addresses:
            self._server.stats.refused_rcpts += 1
            return "550 5.1.1 recipient is not in this garden"
        self._server.stats.accepted_rcpts += 1
        envelope.rcpt_tos.append(parsed.addr.lower())
        envelope.rcpt_options.extend(rcpt_options)
        return "250 2.1.5 Ok"

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        # RFC 2033 4.1: an LMTP server must support PIPELINING. aiosmtpd reads commands
        # one line at a time, so pipelined MAIL/RCPT/DATA are answered in order.
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or envelope.content or b""
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogateescape")
        sender = envelope.mail_from or ""
        replies: list[str] = []
        if len(content) > self._server.data_size_limit:
            return "\r\n".join("552 5.3.4 message too big" for _ in envelope.rcpt_tos)
        for rcpt in envelope.rcpt_tos:
            ok = await self._server._store(rcpt, sender, content)
            replies.append(
                f"250 2.0.0 <{rcpt}> delivered" if ok else f"451 4.3.0 <{rcpt}> delivery failed, try again"
            )
        # One complete reply line per accepted recipient, in RCPT order (RFC 2033 4.2).
        return "\r\n".join(replies)


# `<local@domain>` with both parts dot-atoms (RFC 5322 3.2.3): the form our own
# clients send, then parameters. For it the address is the text between the brackets
# and the parameters follow the white space: exactly what aiosmtpd's full parser
# returns. Anything else (comments included) goes through that parser.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_SIMPLE_ANGLE_ADDR = re.compile(rf"<({_ATEXT}(?:\.{_ATEXT})*@{_ATEXT}(?:\.{_ATEXT})*)>(.*)", re.DOTALL)


def _lmtp_class() -> type[Any]:
    from aiosmtpd.lmtp import LMTP

    class GardenLMTP(LMTP):
        """Refuses peers that are not loopback / Unix before saying anything else."""

        def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
            # aiosmtpd's parser (email._header_value_parser, plus a class built per call)
            # costs more than the rest of a garden transaction; the common form is cheap.
            m = _SIMPLE_ANGLE_ADDR.fullmatch(arg)
            rest = m.group(2) if m is not None else ""
            if rest[:1] in (" ", "\t"):
                rest = rest.lstrip()  # the parser's folding white space, as it strips it
            if m is None or rest.startswith("("):
                result: tuple[str | None, str | None] = super()._getaddr(arg)
                return result
            addr = m.group(1)
            if self.local_part_limit and len(addr.rpartition("@")[0]) > self.local_part_limit:
                return None, None
            return addr, rest

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            peer = transport.get_extra_info("peername")
            garden: GardenServer = self.event_handler._server
            garden.stats.connections += 1
            if not garden.peer_filter(peer):
                garden.stats.refused_peers += 1
                if isinstance(transport, asyncio.WriteTransport):
                    transport.write(b"421 4.7.0 connections are accepted from inside the garden only\r\n")
                transport.close()
                return
            super().connection_made(transport)

    return GardenLMTP


class GardenServer:
    """An LMTP server delivering into per-address Maildirs under `root`.

    addresses -- the garden: the only recipients accepted (bare addresses)
    host/port -- a loopback TCP endpoint (port 0 picks a free one), or
    unix_path -- a Unix socket path (used instead of host/port)
    fsync     -- fsync each delivery before answering 250 (default on)
    on_delivered -- called with (address, path) after each Maildir delivery
    trace_header -- prepend Return-Path and Delivered-To (unsigned, so DKIM still holds)
    peer_filter -- which peers may talk to the garden (default: Unix socket or loopback)
    """

    def __init__(
        self,
        root: Path,
        addresses: Iterable[str],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        unix_path: Path | None = None,
        fsync: bool = True,
        hostname: str = "garden.local",
        on_delivered: Callable[[str, Path], None] | None = None,
        trace_header: bool = True,
        data_size_limit: int = 10 * 1024 * 1024,
        peer_filter: Callable[[Any], bool] = peer_allowed,
    ) -> None:
        if unix_path is None and host not in LOOPBACK_HOSTS:
            try:
                loopback = ipaddress.ip_address(host).is_loopback
            except ValueError:
                loopback = False
            if not loopback:
                raise ConfigError(f"the garden listens on loopback or a Unix socket only, not {host!r}")
        self.root = Path(root)
        self.addresses = frozenset(
            require_address(a, field="garden address").lower() for a in addresses
        )
        if not self.addresses:
            raise ConfigError("a garden needs at least one address")
        self.host, self.port, self.unix_path = host, port, unix_path
        self.fsync = fsync
        self.hostname = hostname
        self.on_delivered = on_delivered
        self.trace_header = trace_header
        self.data_size_limit = data_size_limit
        self.peer_filter = peer_filter
        self.stats = GardenStats()
        self._server: asyncio.AbstractServer | None = None
        self._maildirs: dict[str, Path] = {}

    def maildir(self, address: str) -> Path:
        return mailbox_path(self.root, address)

    @property
    def endpoint(self) -> tuple[str, int] | Path:
        """Where clients connect: (host, port) or the Unix socket path."""
        if self.unix_path is not None:
            return self.unix_path
        return (self.host, self.port)

    async def start(self) -> None:
        for addr in self.addresses:
            self._maildirs[addr] = ensure_maildir(self.maildir(addr))
        cls = _lmtp_class()
        handler = _GardenHandler(self)
        loop = asyncio.get_running_loop()

        def factory() -> Any:
            return cls(
                handler,
                hostname=self.hostname,
                ident="envelopay garden",
                # aiosmtpd's own cap answers once per transaction; ours (in handle_DATA)
                # answers per recipient, so theirs only stops runaway input.
                data_size_limit=self.data_size_limit * 4 + 65536,
                loop=loop,
            )

        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)
            self._server = await loop.create_unix_server(factory, path=str(self.unix_path))
            os.chmod(self.unix_path, 0o600)
        else:
            self._server = await loop.create_server(factory, host=self.host, port=self.port)
            self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if self.unix_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.unix_path)

    async def __aenter__(self) -> GardenServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def _store(self, rcpt: str, sender: str, content: bytes) -> bool:
        data = content
        if self.trace_header:
            path = sender.strip("<>")
            data = f"Return-Path: <{path}>\r\nDelivered-To: {rcpt}\r\n".encode("ascii") + content
        maildir = self._maildirs.get(rcpt) or ensure_maildir(self.maildir(rcpt))
        try:
            # File creation and fsync can block for milliseconds on a busy disk; keep the
            # loop serving other connections meanwhile.
            target = await asyncio.to_thread(deliver_file, maildir, data, fsync=self.fsync)
        except OSError:
            self.stats.failed += 1
            return False
        self.stats.delivered += 1
        if self.on_delivered is not None:
            self.on_delivered(rcpt, target)
        return True


# --------------------------------------------------------------------- client


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


class LmtpClient:
    """A minimal LMTP client (RFC 2033) keeping one connection for many transactions."""

    def __init__(self, endpoint: Endpoint, *, timeout: float = 30.0, name: str = "garden-client") -> None:
        self.endpoint = endpoint
        self.timeout = timeout
        self.name = name
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
        try:
            return await self._transaction(raw, env_from, rcpts)
        except TransportError:
            await self.close()
            raise
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            await self.close()
            raise TransportError(f"LMTP transaction broke: {exc!r}") from exc

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
            raise TransportError(f"LMTP {what} refused: {rep.code} {rep.text}")
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
            if len(text) < 3 or not text[:3].isdigit():
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
    raw: bytes, sender: str, recipients: Sequence[str], endpoint: Endpoint, *, timeout: float = 30.0
) -> DeliveryResult:
    """Deliver one message over LMTP on a fresh connection."""
    _envelope(sender, recipients)
    async with LmtpClient(endpoint, timeout=timeout) as client:
        return await client.send(raw, sender, recipients)
