"""The garden's LMTP session: aiosmtpd's LMTP with the garden's rules — peers that are not
loopback or a Unix socket refused before anything else is said, a bounded number of
connections (logged-in ones apart from those still to log in), an idle deadline that only
progress moves, non-ASCII commands answered in ASCII, the common address form parsed
cheaply. `mail.garden.GardenServer` imports this module when it starts (so aiosmtpd loads
only then).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, AnyStr

from aiosmtpd.lmtp import LMTP
from aiosmtpd.smtp import MISSING

from envelopay.mail.garden_data import read_data
from envelopay.mail.garden_replies import BUSY, NON_ASCII_COMMAND, SIMPLE_ANGLE_ADDR, STRICT_ASCII, shown

__all__ = ["BulkDataLMTP", "GardenLMTP"]

_log = logging.getLogger("envelopay.garden")


class _QuietLegacyLogin(logging.Filter):
    """aiosmtpd sets its deprecated Session.login_data on every successful AUTH and logs
    a warning each time; with AUTH the default, that is one warning per connection."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Session.login_data is deprecated" not in record.getMessage()


_QUIET = _QuietLegacyLogin()
logging.getLogger("mail.log").addFilter(_QUIET)  # aiosmtpd's logger


class BulkDataLMTP(LMTP):
    """aiosmtpd's LMTP with the content of DATA read by garden_data.read_data: in a few
    reads, not a readuntil per line, with aiosmtpd's answers for the same bytes
    (tests/mail/test_garden_data.py runs both on the same streams)."""

    async def smtp_DATA(self, arg: str) -> None:
        if self._decode_data or "DATA" not in self._handle_hooks:
            await super().smtp_DATA(arg)  # not the garden's settings: aiosmtpd's own reading
            return
        # aiosmtpd's smtp_DATA from here, but for how the content is read.
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        assert self.envelope is not None
        if not self.envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        await self.push("354 End data with <CR><LF>.<CR><LF>")
        try:
            content, state = await read_data(self._reader, line_limit=self.line_length_limit,
                                             size_limit=self.data_size_limit)
        except asyncio.CancelledError:
            _log.info("garden: connection lost during DATA")  # eof_received cancels the session
            self._writer.close()
            raise
        except asyncio.IncompleteReadError:
            self._writer.close()  # the peer went away mid-message: nothing was delivered
            return
        if state != "ok":
            await self.push("500 Line too long (see RFC5321 4.5.3.1.6)" if state == "too_long"
                            else "552 Error: Too much mail data")
            self._set_post_data_state()  # type: ignore[no-untyped-call]  # aiosmtpd: a fresh envelope
            return
        self.envelope.content = content
        self.envelope.original_content = content
        status = await self._call_handler_hook("DATA")
        self._set_post_data_state()  # type: ignore[no-untyped-call]  # aiosmtpd: a fresh envelope
        await self.push("250 OK" if status is MISSING else status)


HELD_MAX = 100  # replies held for one write (a group of a hundred recipients)


def _pending(reader: asyncio.StreamReader) -> bytes:
    """What the peer sent that no command has read yet (asyncio's StreamReader keeps it
    in `_buffer`; a Python without that attribute gets b"": nothing is held, as before)."""
    buffer: bytes = getattr(reader, "_buffer", b"")
    return buffer


class GardenLMTP(BulkDataLMTP):
    """Refuses peers that are not loopback / Unix before saying anything else."""

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        # aiosmtpd's parser (email._header_value_parser, plus a class built per call)
        # costs more than the rest of a garden transaction; the common form is cheap.
        m = SIMPLE_ANGLE_ADDR.fullmatch(arg)
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

    _refused = False
    _held: list[bytes]  # replies stored for a group (push), sent with the next one

    async def push(self, status: AnyStr) -> None:
        if isinstance(status, str) and status == STRICT_ASCII:
            reply = NON_ASCII_COMMAND.encode()
        elif isinstance(status, str) and not status.isascii():
            # aiosmtpd would raise UnicodeEncodeError and answer "500 Error: (...)".
            reply = "\r\n".join(shown(line) for line in status.split("\r\n")).encode()
        elif isinstance(status, str):
            reply = status.encode("utf-8" if self.enable_SMTPUTF8 else "ascii")  # as aiosmtpd's push
        else:
            reply = status
        # RFC 2920 3.2: the replies to grouped RSET, MAIL and RCPT may be stored and sent
        # as a unit, and the server never waits for input with a reply held. Held here only
        # while the next command is already in (it is read at once); any other reply
        # sends them first, in order. At most HELD_MAX: a client that pipelines without
        # end and never reads is slowed by the writes' backpressure, as without holding.
        if self._grouping and len(self._held) < HELD_MAX and b"\n" in _pending(self._reader):
            self._held.append(reply)
            return
        if self._held:
            reply, self._held = b"\r\n".join((*self._held, reply)), []
        await super().push(reply)
        if self._close_after_reply and self.transport is not None:
            self.transport.close()

    _grouping = False  # in MAIL, RCPT or RSET: its reply may wait for the next one

    async def smtp_MAIL(self, arg: str | None) -> None:
        await self._grouped(super().smtp_MAIL(arg))

    async def smtp_RCPT(self, arg: str | None) -> None:
        await self._grouped(super().smtp_RCPT(arg))

    async def smtp_RSET(self, arg: str) -> None:
        await self._grouped(super().smtp_RSET(arg))

    async def _grouped(self, command: Awaitable[None]) -> None:
        self._grouping = True
        try:
            await command
        finally:
            self._grouping = False

    _logged_in = False  # authenticated (an open garden: from the start)
    _close_after_reply = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._held = []
        peer = transport.get_extra_info("peername")
        garden: Any = self.event_handler._server  # the GardenServer
        garden.stats.connections += 1
        refusal = b""
        if not garden.peer_filter(peer):
            garden.stats.refused_peers += 1
            refusal = b"421 4.7.0 connections are accepted from inside the garden only\r\n"
            _log.warning("garden: refused a connection from %r (not loopback or a Unix socket)", peer)
        elif not garden.requires_auth and garden.active >= garden.max_connections:
            garden.stats.refused_busy += 1
            refusal = BUSY.encode() + b"\r\n"
            _log.warning("garden: refused a connection: %d open (max_connections)", garden.active)
        if refusal:
            self._refused = True
            if isinstance(transport, asyncio.WriteTransport):
                transport.write(refusal)
            transport.close()
            return
        if garden.requires_auth:
            garden._pending_add(self)  # its own budget: logged-in agents keep theirs
        else:
            garden.active += 1  # an open garden has no login: every connection counts
            self._logged_in = True
        super().connection_made(transport)

    def log_in(self) -> bool:
        """AUTH succeeded: take a logged-in slot (False when all are taken: 421)."""
        garden: Any = self.event_handler._server  # the GardenServer
        if garden.active >= garden.max_connections:
            garden.stats.refused_busy += 1
            _log.warning("garden: refused a login: %d logged in (max_connections)", garden.active)
            self._close_after_reply = True
            return False
        garden._pending.pop(self, None)
        garden.active += 1
        self._logged_in = True
        self.progress()
        return True

    # aiosmtpd calls _reset_timeout on connect and again before every command it
    # recognises, NOOP and RSET included, so a connection could hold its slot forever
    # by chattering. Here only the first call sets a deadline (the login deadline for
    # a connection that has not logged in); after that only progress moves it.
    def _reset_timeout(self, duration: float | None = None) -> None:
        if self._timeout_handle is None:
            garden: Any = self.event_handler._server  # the GardenServer
            first = garden.idle_timeout if self._logged_in else min(garden.login_timeout,
                                                                    garden.idle_timeout)
            super()._reset_timeout(first)

    def progress(self) -> None:
        """The session moved on (AUTH, MAIL, RCPT, DATA): a fresh idle deadline."""
        super()._reset_timeout(self.event_handler._server.idle_timeout)

    async def smtp_DATA(self, arg: str) -> None:
        if self.envelope is not None and self.envelope.rcpt_tos:  # the upload: its own idle period
            self.progress()
        await super().smtp_DATA(arg)

    def _timeout_cb(self) -> None:
        # Say why before hanging up (RFC 5321 4.2.2: 421 closes the channel).
        self._hang_up(b"421 4.4.2 timeout, closing connection\r\n")

    def evict(self) -> None:
        """Closed to make room: the oldest connection that has not logged in."""
        self._hang_up(b"421 4.7.0 too many connections not logged in, closing the oldest\r\n")

    def _hang_up(self, reply: bytes) -> None:
        transport = self.transport
        if isinstance(transport, asyncio.WriteTransport):
            held, self._held = self._held, []
            transport.write(b"".join(h + b"\r\n" for h in held) + reply)
        if transport is not None:
            transport.close()

    # A refused connection never started an aiosmtpd session: its callbacks must not
    # run (they assert a session exists, and each refusal logged a traceback).
    def connection_lost(self, error: Exception | None) -> None:
        if self._refused:
            return
        garden: Any = self.event_handler._server  # the GardenServer
        if self._logged_in:
            garden.active -= 1
        else:
            garden._pending.pop(self, None)
        super().connection_lost(error)

    def data_received(self, data: bytes) -> None:
        if not self._refused:
            super().data_received(data)

    def eof_received(self) -> bool | None:
        if self._refused:
            return None
        result: bool | None = super().eof_received()
        return result
