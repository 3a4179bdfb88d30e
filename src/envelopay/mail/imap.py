"""IMAP in: IDLE push, resync by UID, raw fetch, mark processed only after success.

`ImapSource(config)` reads one mailbox of one account:

- `sync_once(consumer)` connects, handles every message that does not yet carry the
  processed flag, and disconnects.
- `run(consumer)` keeps a connection open and waits in IDLE; a push (EXISTS) fetches
  the UIDs above the last one seen; a dropped connection or a restarted server is
  re-dialled with capped exponential backoff, and every (re)connect begins with a full
  pass, so nothing that arrived while we were away is missed.

A message is fetched with ``BODY.PEEK[]`` (the exact bytes, \\Seen untouched) and handed
to the consumer. Only when the consumer returns True (its ledger transaction has
committed) is the message marked: the keyword flag is stored, and with `move_to` it is
moved to that folder as well. A consumer that returns False or raises leaves the
message unmarked, so the next pass offers it again; the consumer must therefore be
idempotent (the ledger claims each Message-ID once).

UIDs are only meaningful together with the mailbox's UIDVALIDITY. The source remembers
UIDs whose consumer succeeded but whose flag could not be stored yet (the connection
broke in between), to flag them on the next pass without consuming them twice. Those
UIDs, and the incremental watermark, are discarded when UIDVALIDITY changes; the next
pass is then a full resync.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError, TransportError
from envelopay.mail.atomic import atomic_write_json
from envelopay.mail.imap_responses import parse_fetch, search_uids, uidvalidity

__all__ = [
    "Consumer",
    "ImapConfig",
    "ImapMessage",
    "ImapSource",
    "ImapStats",
    "Processed",
    "SyncState",
    "parse_fetch",
]

log = logging.getLogger(__name__)

_FLAG_RE = re.compile(r"^\$?[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ImapConfig:
    """Where and how to read. `tls` means implicit TLS (IMAPS, usually port 993)."""

    host: str
    port: int
    user: str
    password: str
    mailbox: str = "INBOX"
    tls: bool = False
    ssl_context: ssl.SSLContext | None = None
    processed_flag: str = "$EnvelopayProcessed"
    move_to: str | None = None
    timeout: float = 30.0  # per IMAP command
    idle_renew: float = 25 * 60.0  # RFC 2177: re-issue IDLE before the 29-minute server timeout
    full_pass_every: float = 300.0  # retry unmarked (failed) messages at least this often
    reconnect_initial: float = 0.2
    reconnect_max: float = 30.0
    fetch_batch: int = 25

    def __post_init__(self) -> None:
        # Refused before any I/O: these values are written into IMAP commands.
        if not _FLAG_RE.fullmatch(self.processed_flag) or self.processed_flag.startswith("\\"):
            raise ConfigError(f"processed_flag: not a valid IMAP keyword: {self.processed_flag!r}")
        for name in ("mailbox", "move_to", "user", "host"):
            value = getattr(self, name)
            if value is not None and (not value or any(c in value for c in '\r\n"\\\0')):
                raise ConfigError(f"{name}: empty or contains a forbidden character")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port: out of range: {self.port}")
        if self.fetch_batch < 1:
            raise ConfigError("fetch_batch: must be at least 1")


@dataclass(frozen=True, slots=True)
class ImapMessage:
    """One fetched message: the exact bytes the server holds, and where they came from."""

    uid: int
    uidvalidity: int
    mailbox: str
    raw: bytes
    flags: frozenset[str]


@dataclass(frozen=True, slots=True)
class Processed:
    """A consumer's success that also asks for extra keywords beside the processed flag,
    e.g. ``$EnvelopayMalformed`` for a message that was kept but not understood."""

    extra_flags: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for flag in self.extra_flags:
            if not _FLAG_RE.fullmatch(flag):
                raise ConfigError(f"extra_flags: not a valid IMAP keyword: {flag!r}")


# True (or Processed) once the message is committed; False (or raising) leaves it unmarked.
Consumer = Callable[[ImapMessage], Awaitable[bool | Processed]]


@dataclass
class SyncState:
    """What survives between passes (and, with `path`, between processes)."""

    uidvalidity: int | None = None
    last_uid: int = 0  # highest UID offered to the consumer under `uidvalidity`
    unflagged_done: set[int] = field(default_factory=set)  # consumed, flag not stored yet
    path: Path | None = None

    @classmethod
    def load(cls, path: Path) -> SyncState:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path=path)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"IMAP sync state {path} is unreadable: {exc}") from exc
        return cls(
            uidvalidity=data.get("uidvalidity"),
            last_uid=int(data.get("last_uid", 0)),
            unflagged_done={int(u) for u in data.get("unflagged_done", [])},
            path=path,
        )

    def save(self) -> None:
        if self.path is None:
            return
        data = {
            "uidvalidity": self.uidvalidity,
            "last_uid": self.last_uid,
            "unflagged_done": sorted(self.unflagged_done),
        }
        atomic_write_json(self.path, data)

    def observe_uidvalidity(self, uidvalidity: int) -> bool:
        """Record the mailbox's UIDVALIDITY; True when it changed (UIDs we hold are void)."""
        changed = self.uidvalidity is not None and self.uidvalidity != uidvalidity
        if changed or self.uidvalidity is None:
            self.uidvalidity = uidvalidity
            self.last_uid = 0
            self.unflagged_done.clear()
            self.save()
        return changed


@dataclass
class ImapStats:
    connects: int = 0
    passes: int = 0
    full_resyncs: int = 0  # passes caused by a changed UIDVALIDITY
    consumed: int = 0
    marked: int = 0
    consumer_failures: int = 0
    disconnects: int = 0


class _Lost(Exception):
    """The connection went away while we were waiting."""


class ImapSource:
    """Reads one IMAP mailbox and hands each unprocessed message to a consumer."""

    def __init__(self, config: ImapConfig, state: SyncState | None = None) -> None:
        self.config = config
        self.state = state if state is not None else SyncState()
        self.stats = ImapStats()
        self.connected = asyncio.Event()  # set while a selected connection is idling/working
        self._lost = asyncio.Event()
        self._exists_seen = False

    # -- public API -----------------------------------------------------------------
    async def sync_once(self, consumer: Consumer) -> int:
        """One full pass over the mailbox; returns how many messages were marked."""
        client = await self._connect()
        try:
            return await self._pass(client, consumer, full=True)
        finally:
            await self._close(client)

    async def run(self, consumer: Consumer, stop: asyncio.Event | None = None) -> None:
        """IDLE loop with reconnect; returns when `stop` is set (or the task is cancelled)."""
        stop = stop if stop is not None else asyncio.Event()
        delay = self.config.reconnect_initial
        while not stop.is_set():
            client: Any = None
            try:
                client = await self._connect()
                delay = self.config.reconnect_initial
                await self._pass(client, consumer, full=True)
                await self._idle_loop(client, consumer, stop)
            except (OSError, TimeoutError, _Lost, TransportError) as exc:
                self.stats.disconnects += 1
                log.warning(
                    "IMAP %s:%s: %s; reconnecting in %.1fs",
                    self.config.host,
                    self.config.port,
                    exc or type(exc).__name__,
                    delay,
                )
            except Exception as exc:
                if not _is_aioimap_error(exc):
                    raise
                self.stats.disconnects += 1
                log.warning("IMAP protocol error: %s; reconnecting in %.1fs", exc, delay)
            finally:
                self.connected.clear()
                if client is not None:
                    await self._close(client)
            if stop.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)
            delay = min(delay * 2, self.config.reconnect_max)

    # -- connection -----------------------------------------------------------------
    async def _connect(self) -> Any:
        import aioimaplib  # lazy: keeps aioimaplib off this module's import

        cfg = self.config
        self._lost = asyncio.Event()
        lost = self._lost

        def on_lost(_exc: Exception | None) -> None:
            lost.set()

        try:
            if cfg.tls:
                client = aioimaplib.IMAP4_SSL(
                    cfg.host, cfg.port, timeout=cfg.timeout, ssl_context=cfg.ssl_context
                )
                client.protocol.conn_lost_cb = on_lost
            else:
                client = aioimaplib.IMAP4(cfg.host, cfg.port, timeout=cfg.timeout, conn_lost_cb=on_lost)
            await client.wait_hello_from_server()
            resp = await client.login(cfg.user, cfg.password)
        except (OSError, TimeoutError) as exc:
            raise TransportError(f"IMAP connect to {cfg.host}:{cfg.port} failed: {exc}") from exc
        if resp.result != "OK":
            await self._close(client)
            raise TransportError(f"IMAP login refused for {cfg.user}: {_text(resp)}")
        self.stats.connects += 1
        self._watch_exists(client)
        resp = await client.select(_quote(cfg.mailbox))
        if resp.result != "OK":
            await self._close(client)
            raise TransportError(f"IMAP SELECT {cfg.mailbox} failed: {_text(resp)}")
        validity = uidvalidity(resp.lines)
        if validity is None:
            await self._close(client)
            raise TransportError("IMAP server sent no UIDVALIDITY on SELECT")
        if self.state.observe_uidvalidity(validity):
            self.stats.full_resyncs += 1
            log.info("IMAP %s: UIDVALIDITY changed to %d; full resync", cfg.mailbox, validity)
        self.connected.set()
        return client

    def _watch_exists(self, client: Any) -> None:
        """Note every untagged EXISTS, including those aioimaplib would drop."""
        proto = client.protocol
        original = getattr(proto, "_untagged_response", None)
        if original is None:  # another aioimaplib: the periodic full pass still finds the mail
            return

        def spy(line: bytes) -> Any:
            if bytes(line).rstrip().upper().endswith(b"EXISTS"):
                self._exists_seen = True
            return original(line)

        proto._untagged_response = spy

    async def _close(self, client: Any) -> None:
        with contextlib.suppress(Exception):
            if client.has_pending_idle():
                client.idle_done()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.logout(), timeout=2)
        with contextlib.suppress(Exception):
            client.protocol.transport.close()

    async def _io(self, aw: Awaitable[Any]) -> Any:
        """Await one IMAP exchange, but give up as soon as the connection is lost: a
        command sent into a dying connection never gets its tagged answer."""
        task = asyncio.ensure_future(aw)
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            done, _ = await asyncio.wait(
                {task, lost}, timeout=self.config.timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            lost.cancel()
        if task in done:
            return task.result()
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise _Lost("connection lost" if self._lost.is_set() else "IMAP command timed out")

    # -- IDLE -------------------------------------------------------------------------
    async def _idle_loop(self, client: Any, consumer: Consumer, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        last_full = loop.time()
        while not stop.is_set():
            if self._lost.is_set():
                raise _Lost("connection lost")
            idle = await self._io(client.idle_start(timeout=self.config.idle_renew))
            wait_push = asyncio.ensure_future(client.wait_server_push(timeout=self.config.idle_renew + 60))
            wait_stop = asyncio.ensure_future(stop.wait())
            wait_lost = asyncio.ensure_future(self._lost.wait())
            timeout = max(0.1, self.config.full_pass_every - (loop.time() - last_full))
            try:
                done, _ = await asyncio.wait(
                    {wait_push, wait_stop, wait_lost}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                for fut in (wait_push, wait_stop, wait_lost):
                    if not fut.done():
                        fut.cancel()
            if wait_lost in done:
                idle.cancel()
                raise _Lost("connection lost during IDLE")
            push: list[bytes] = []
            if wait_push in done and not wait_push.cancelled() and wait_push.exception() is None:
                result = wait_push.result()
                if isinstance(result, list):
                    push = [bytes(x) for x in result if isinstance(x, bytes | bytearray)]
            if client.has_pending_idle():
                client.idle_done()
            await self._io(idle)
            if stop.is_set():
                return
            due = loop.time() - last_full >= self.config.full_pass_every
            if due:
                last_full = loop.time()
                await self._pass(client, consumer, full=True)
            elif any(b"EXISTS" in line for line in push):
                await self._pass(client, consumer, full=False)

    # -- one pass ---------------------------------------------------------------------
    async def _pass(self, client: Any, consumer: Consumer, full: bool) -> int:
        """Offer unmarked messages; full=False looks only above the watermark.

        After the first search, incremental searches repeat until a round finds nothing
        new and no EXISTS arrived since it began: the server announces new mail once, at
        whatever command is running (aioimaplib drops EXISTS inside SEARCH or STORE
        answers, so `_watch_exists` records them), and in IDLE only what it has not
        announced yet."""
        self.stats.passes += 1
        marked = 0
        while True:
            self._exists_seen = False
            criteria = f"UNKEYWORD {self.config.processed_flag}"
            if not full:
                criteria = f"UID {self.state.last_uid + 1}:* {criteria}"
            resp = await self._io(client.uid_search(criteria, charset=None))
            _check(resp, "UID SEARCH")
            uids = sorted(search_uids(resp.lines))
            if not full:
                # `n:*` always matches the highest UID, even when it is below n.
                uids = [u for u in uids if u > self.state.last_uid]
            marked += await self._handle(client, consumer, uids)
            if not uids and not self._exists_seen:
                break
            full = False
        self.state.save()
        return marked

    async def _handle(self, client: Any, consumer: Consumer, uids: list[int]) -> int:
        cfg = self.config
        marked = 0
        # Consumed earlier but the flag was lost with the connection: flag, don't re-consume.
        redo = [u for u in uids if u in self.state.unflagged_done]
        todo = [u for u in uids if u not in self.state.unflagged_done]
        for uid in redo:
            await self._mark(client, uid)
            marked += 1
        for start in range(0, len(todo), cfg.fetch_batch):
            batch = todo[start : start + cfg.fetch_batch]
            for msg in await self._fetch(client, batch):
                self.state.last_uid = max(self.state.last_uid, msg.uid)
                extra = await self._consume(consumer, msg)
                if extra is None:
                    continue
                self.state.unflagged_done.add(msg.uid)
                self.state.save()
                await self._mark(client, msg.uid, extra)
                marked += 1
        if cfg.move_to is not None and marked:
            await self._expunge_moved(client)
        return marked

    async def _consume(self, consumer: Consumer, msg: ImapMessage) -> frozenset[str] | None:
        """The extra flags to store on success; None when the consumer did not succeed."""
        try:
            ok = await consumer(msg)
        except Exception:
            # The consumer's failure is not ours to fix; the message stays for the next pass.
            log.exception("IMAP consumer failed on UID %d", msg.uid)
            ok = False
        if ok is True or isinstance(ok, Processed):
            self.stats.consumed += 1
            return ok.extra_flags if isinstance(ok, Processed) else frozenset()
        self.stats.consumer_failures += 1
        return None

    async def _fetch(self, client: Any, uids: list[int]) -> list[ImapMessage]:
        uid_set = ",".join(str(u) for u in uids)
        resp = await self._io(client.uid("fetch", uid_set, "(UID FLAGS BODY.PEEK[])"))
        _check(resp, "UID FETCH")
        found = parse_fetch(resp.lines)
        uidvalidity = self.state.uidvalidity or 0
        return [
            ImapMessage(uid=uid, uidvalidity=uidvalidity, mailbox=self.config.mailbox, raw=raw, flags=flags)
            for uid, flags, raw in found
            if uid in set(uids)
        ]

    async def _mark(self, client: Any, uid: int, extra: frozenset[str] = frozenset()) -> None:
        cfg = self.config
        flags = " ".join([cfg.processed_flag, *sorted(extra)])
        resp = await self._io(client.uid("store", str(uid), "+FLAGS.SILENT", f"({flags})"))
        _check(resp, "UID STORE")
        if cfg.move_to is not None:
            if client.has_capability("MOVE"):
                resp = await self._io(client.uid("move", str(uid), _quote(cfg.move_to)))
                _check(resp, "UID MOVE")
            else:
                resp = await self._io(client.uid("copy", str(uid), _quote(cfg.move_to)))
                _check(resp, "UID COPY")
                resp = await self._io(client.uid("store", str(uid), "+FLAGS.SILENT", "(\\Deleted)"))
                _check(resp, "UID STORE")
        self.state.unflagged_done.discard(uid)
        self.stats.marked += 1

    async def _expunge_moved(self, client: Any) -> None:
        if client.has_capability("MOVE"):
            return
        resp = await self._io(client.expunge())
        _check(resp, "EXPUNGE")


def _quote(name: str) -> str:
    return f'"{name}"'


def _text(resp: Any) -> str:
    return " ".join(bytes(x).decode(errors="replace") for x in resp.lines[-1:])


def _check(resp: Any, what: str) -> None:
    if resp.result != "OK":
        raise TransportError(f"IMAP {what} failed: {resp.result} {_text(resp)}")


def _is_aioimap_error(exc: BaseException) -> bool:
    import aioimaplib  # lazy: keeps aioimaplib off this module's import

    return isinstance(exc, aioimaplib.AioImapException)
