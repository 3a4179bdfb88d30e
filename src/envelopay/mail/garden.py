"""The walled garden: endpoint mailboxes reachable only from inside.

The seed (email-as-tool-endpoints) asks for the garden to be "enforced at the transport
layer (LMTP/Maildir, no public MX), not by obscurity of the address". So:

- `GardenServer` speaks LMTP (aiosmtpd) on a loopback address or a Unix socket only;
  a connection from any other peer gets 421 and is closed;
- every sender authenticates with its own garden account (mail.garden_auth) and may
  send only as that account's addresses; an open garden is an explicit, logged opt-out;
- a recipient outside the garden's address list is refused at RCPT (550 5.1.1);
- after DATA it answers once per accepted recipient (RFC 2033 4.2; aiosmtpd's LMTP
  sends a single reply by itself), each reply given only after that recipient's copy
  is safely in its Maildir's new/ (see envelopay.mail.maildir for the layout).

`LmtpClient` / `deliver()` (mail.transport.lmtp_client, re-exported here) is the sending
side; the LMTP session itself is `mail.garden_lmtp`, its reply texts `mail.garden_replies`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError
from envelopay.mail.addresses import Address, parse_address, require_address
from envelopay.mail.garden_auth import (
    GardenAccount,
    all_froms_allowed,
    claims_of,
    from_address,
    stamp,
    stamp_prepend,
)
from envelopay.mail.garden_replies import BUSY, shown
from envelopay.mail.maildir import UnsafeMaildir, deliver_file, ensure_maildir, mailbox_path

# The client side lives in mail.transport.lmtp_client; these names stay importable from here.
from envelopay.mail.transport.lmtp_client import DeliveryResult, Endpoint, LmtpClient, Reply, deliver
from envelopay.protocol.headers import HeaderRefusal, read_headers

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
_log = logging.getLogger("envelopay.garden")


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
    refused_busy: int = 0
    evicted: int = 0  # connections not logged in, closed to make room for a newer one
    refused_auth: int = 0
    refused_from: int = 0


class _GardenHandler:
    """aiosmtpd handler hooks: who is sending (AUTH, MAIL, From), RCPT membership and
    per-recipient Maildir delivery."""

    def __init__(self, server: GardenServer) -> None:
        self._server = server

    def _account(self, session: Any) -> GardenAccount | None:
        """The session's account as the garden holds it now: an address taken from it
        (`garden account --take`) or the account removed since its AUTH counts at once."""
        data = getattr(session, "auth_data", None) if session.authenticated else None
        if not isinstance(data, GardenAccount):
            return None
        current = self._server.accounts.get(data.user)
        return current if current is not None and current.secret_sha256 == data.secret_sha256 else None

    def authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> Any:
        from aiosmtpd.smtp import AuthResult, LoginPassword  # lazy: keeps aiosmtpd off this module's import

        account = None
        if isinstance(auth_data, LoginPassword):
            user = auth_data.login.decode("utf-8", "replace")
            secret = auth_data.password.decode("utf-8", "replace")
            account = self._server.account(user, secret)
        if account is None:
            self._server.stats.refused_auth += 1
            # handled=False: aiosmtpd answers 535 (handled=True would answer nothing).
            return AuthResult(success=False, handled=False)
        if not server.log_in():
            return AuthResult(success=False, handled=False, message=BUSY)
        return AuthResult(success=True, auth_data=account)

    async def handle_MAIL(
        self, server: Any, session: Any, envelope: Any, address: str, mail_options: list[str]
    ) -> str:
        if address not in ("", "<>") and _bare(address) is None:
            return "553 5.1.7 sender address refused: not exactly one valid address"
        if self._server.requires_auth:
            if session.authenticated:
                self._server.refreshed()  # a take or removal since this login counts now
            account = self._account(session)
            if account is None:
                return "530 5.7.0 authentication required: this garden knows its senders"
            bare = _bare(address)
            if bare is not None and not account.may_send_as(bare.addr):
                return f"553 5.7.1 {account.user} may not send as {shown(bare.addr)}"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        server.progress()
        return "250 2.1.0 Ok"

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]
    ) -> str:
        parsed = _bare(address)
        if parsed is not None and parsed.addr.lower() not in self._server.addresses:
            self._server.refreshed()  # an agent registered a moment ago (the devnet)
        if parsed is None or parsed.addr.lower() not in self._server.addresses:
            self._server.stats.refused_rcpts += 1
            return "550 5.1.1 recipient is not in this garden"
        self._server.stats.accepted_rcpts += 1
        # A repeated RCPT is accepted (and gets its own DATA reply, RFC 2033 4.2) but
        # stores one copy: see handle_DATA.
        envelope.rcpt_tos.append(parsed.addr.lower())
        envelope.rcpt_options.extend(rcpt_options)
        server.progress()
        return "250 2.1.5 Ok"

    async def handle_EHLO(
        self, server: Any, session: Any, envelope: Any, hostname: str, responses: list[str]
    ) -> list[str]:
        # RFC 2033 4.1: an LMTP server must support PIPELINING. aiosmtpd reads commands
        # one line at a time, so pipelined MAIL/RCPT/DATA are answered in order.
        session.host_name = hostname
        return [*responses[:-1], "250-PIPELINING", responses[-1]]

    def _admit(self, session: Any, content: bytes) -> bytes | str:
        """The bytes to store, or the refusal every recipient gets."""
        read = read_headers(content)
        account = self._account(session)
        if isinstance(read, HeaderRefusal):
            if not self._server.requires_auth:
                # An open garden checks no From: the block is stored as it came, and every
                # reader downstream (parser, DKIM, authenticated_sender) refuses it the same way.
                return content
            # A block refused only for a repeated singleton still has every field read: it
            # goes in when every From it carries is the sender's (whichever a reader picks,
            # it is that), so the worker can answer it invalid_field. Any other refusal
            # leaves no From to check.
            readable = read.reason == "duplicate" and not claims_of(read.partial, self._server.hostname)
            if account is not None and readable and all_froms_allowed(account, read.partial):
                return stamp_prepend(content, authserv_id=self._server.hostname, user=account.user)
            return f"550 5.6.0 header block refused ({read.reason})"
        if self._server.requires_auth:
            frm = from_address(read)
            if account is None or frm is None or not account.may_send_as(frm):
                self._server.stats.refused_from += 1
                who = account.user if account is not None else "an unauthenticated sender"
                return f"550 5.7.1 {who} may not send From {shown(frm) if frm else 'that header'}"
        return stamp(content, read, authserv_id=self._server.hostname,
                     user=account.user if account is not None else None)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        content = envelope.original_content or envelope.content or b""
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogateescape")
        sender = envelope.mail_from or ""
        if len(content) > self._server.data_size_limit:
            return "\r\n".join("552 5.3.4 message too big" for _ in envelope.rcpt_tos)
        admitted = self._admit(session, content)
        if isinstance(admitted, str):
            return "\r\n".join(admitted for _ in envelope.rcpt_tos)
        replies: list[str] = []
        stored: dict[str, bool] = {}
        for rcpt in envelope.rcpt_tos:
            if rcpt not in stored:  # the same RCPT twice: one copy, the same answer twice
                stored[rcpt] = await self._server._store(rcpt, sender, admitted)
            ok = stored[rcpt]
            replies.append(
                f"250 2.0.0 <{rcpt}> delivered" if ok else f"451 4.3.0 <{rcpt}> delivery failed, try again"
            )
        server.progress()
        # One complete reply line per accepted recipient, in RCPT order (RFC 2033 4.2).
        return "\r\n".join(replies)


class GardenServer:
    """An LMTP server delivering into per-address Maildirs under `root`.

    addresses -- the garden: the only recipients accepted (bare addresses)
    host/port -- a loopback TCP endpoint (port 0 picks a free one), or
    unix_path -- a Unix socket path (used instead of host/port)
    fsync     -- fsync each delivery before answering 250 (default on)
    on_delivered -- called with (address, path) after each Maildir delivery
    trace_header -- prepend Return-Path and Delivered-To (unsigned, so DKIM still holds)
    peer_filter -- which peers may talk to the garden (default: Unix socket or loopback)
    accounts  -- per-agent credentials (mail.garden_auth): every sender must AUTH, may
                 use only its account's addresses in MAIL FROM and From, and each stored
                 copy carries the garden's Authentication-Results naming it. Required
                 (an empty list: nobody may send until `accounts` is filled in) unless
    open_garden -- True: the legacy open garden, no AUTH, any local process may send From
                 any garden address. Explicit, and logged as a warning at start.
    refresh   -- called at each AUTH, each MAIL of a logged-in session and before refusing
                 an unknown recipient, to re-read who exists (an accounts file: one stat
                 when unchanged; the devnet's registry); the session's account is looked
                 up again at MAIL and DATA, so a grant, take or removal counts from then on
    idle_timeout -- seconds a logged-in connection may go without progress (AUTH, MAIL,
                 RCPT, DATA) before the garden closes it (421 4.4.2); NOOP, RSET and the
                 like do not count
    max_connections -- logged-in connections at once (an open garden: all connections);
                 a login past it gets 421 and is closed
    login_timeout -- seconds from connect a connection has to log in (AUTH); nothing it
                 sends before then extends it (nor idle_timeout, whichever ends first)
    max_unauthenticated -- connections not logged in at once, apart from max_connections:
                 one more closes the oldest of them (421), so idle connections that never
                 AUTH cannot keep agents out
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
        accounts: Iterable[GardenAccount] | None = None,
        open_garden: bool = False,
        refresh: Callable[[], None] | None = None,
        idle_timeout: float = 60.0,
        max_connections: int = 64,
        login_timeout: float = 10.0,
        max_unauthenticated: int = 64,
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
        if open_garden and accounts is not None:
            raise ConfigError("garden: accounts and open_garden=True contradict each other")
        if accounts is None and not open_garden:
            raise ConfigError(
                "garden: give accounts (every sender authenticates; mail.garden_auth) or, for a "
                "legacy setup, open_garden=True (any local process may send From any garden address)"
            )
        self.requires_auth = not open_garden
        self.accounts: dict[str, GardenAccount] = {a.user: a for a in accounts or ()}
        self.refresh = refresh
        if not all(0 < t <= 86_400 for t in (idle_timeout, login_timeout)):  # NaN fails too
            raise ConfigError("garden: idle_timeout and login_timeout are seconds, more than 0 and at "
                              "most a day")
        if max_connections < 1 or max_unauthenticated < 1:
            raise ConfigError("garden: max_connections and max_unauthenticated must be >= 1")
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.login_timeout = login_timeout
        self.max_unauthenticated = max_unauthenticated
        self.active = 0  # logged-in connections (an open garden: all of them)
        self._pending: dict[Any, None] = {}  # connections not logged in yet, oldest first
        self.stats = GardenStats()
        self._server: asyncio.AbstractServer | None = None
        self._maildirs: dict[str, Path] = {}

    def maildir(self, address: str) -> Path:
        return mailbox_path(self.root, address)

    @property
    def unauthenticated(self) -> int:
        """Connections open that have not logged in."""
        return len(self._pending)

    def _pending_add(self, conn: Any) -> None:
        while len(self._pending) >= self.max_unauthenticated:
            oldest = next(iter(self._pending))
            del self._pending[oldest]
            self.stats.evicted += 1
            oldest.evict()
        self._pending[conn] = None

    def refreshed(self) -> None:
        if self.refresh is not None:
            try:
                self.refresh()
            except Exception:  # a broken registry must not take the garden down
                _log.exception("garden: refreshing its accounts failed")

    def account(self, user: str, secret: str) -> GardenAccount | None:
        """The account `user` proves with `secret`. Who exists is re-read first (the
        refresh hook; an accounts file: one stat when unchanged), so a login sees every
        grant, take and removal made before it."""
        self.refreshed()
        found = self.accounts.get(user)
        return found if found is not None and found.check(secret) else None

    @property
    def endpoint(self) -> tuple[str, int] | Path:
        """Where clients connect: (host, port) or the Unix socket path."""
        if self.unix_path is not None:
            return self.unix_path
        return (self.host, self.port)

    async def start(self) -> None:
        if not self.requires_auth:
            _log.warning("garden %s is OPEN (open_garden=True): no sender authenticates, any local "
                         "process may send From any of its addresses", self.hostname)
        for addr in self.addresses:
            try:
                self._maildirs[addr] = ensure_maildir(self.maildir(addr))
            except UnsafeMaildir as exc:  # one tampered folder must not keep the garden down
                _log.warning("garden: %s: %s; deliveries to it are refused (451) until it is fixed",
                             exc.filename, exc.strerror)
        from envelopay.mail.garden_lmtp import GardenLMTP  # lazy: keeps aiosmtpd off this module's import

        cls = GardenLMTP
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
                timeout=self.idle_timeout,
                # AUTH over loopback / a Unix socket: the bytes never leave the host, so
                # no TLS; the MAIL hook (not aiosmtpd's auth_required) demands it.
                auth_require_tls=False,
                authenticator=handler.authenticate if self.requires_auth else None,
                auth_exclude_mechanism=["LOGIN"],
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
        try:
            maildir = self._maildirs.get(rcpt) or ensure_maildir(self.maildir(rcpt))
            # File creation and fsync can block for milliseconds on a busy disk; keep the
            # loop serving other connections meanwhile.
            target = await asyncio.to_thread(deliver_file, maildir, data, fsync=self.fsync)
        except UnsafeMaildir as exc:  # nothing written through the link (maildir.open_maildir)
            self.stats.failed += 1
            _log.warning("garden: delivery to %s refused: %s: %s", rcpt, exc.filename, exc.strerror)
            return False
        except OSError:
            self.stats.failed += 1
            return False
        self.stats.delivered += 1
        if self.on_delivered is not None:
            self.on_delivered(rcpt, target)
        return True



__all__ = [
    "DeliveryResult",
    "Endpoint",
    "GardenAccount",
    "GardenServer",
    "GardenStats",
    "LmtpClient",
    "Reply",
    "deliver",
    "peer_allowed",
]
