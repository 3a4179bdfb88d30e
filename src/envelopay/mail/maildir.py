"""Maildir delivery and pickup for the walled garden.

Layout (shared with the agent mailbox, which reads the same directories)::

    <root>/<local@domain>/          one Maildir per garden address (its inbox)
        tmp/  new/  cur/

The directory name is the bare address, lower-cased. A delivery is written to tmp/,
flushed (and fsynced unless disabled), then hard-linked into new/ and unlinked from
tmp/: a reader never sees a partial file (the Maildir protocol; `mailbox.Maildir`
reads these files unchanged). The file name is `<seconds>.M<micro>P<pid>Q<n>R<rand>.<host>`,
with `,W=<size>` when the message is stored with LF line ends (below).

Line ends: stored LF when that is exact, read back as received, CRLF (`line_ends`).

`Pickup` hands each new file to a consumer as soon as it appears: inotify on every
new/ directory (ctypes; Linux), or a poll where inotify is unavailable: the poll
stats each new/ (an fstat of the directory held open, `dir_stamps`, within a budget
of descriptors) and lists only those whose mtime moved (or moved within the last
second, where a coarse clock could hide a second change), so an idle pickup over 1,000
addresses costs 1,000 fstat calls a tick, not 1,000 listings; and while nothing arrives
its tick doubles from `poll_interval` (10 ms) up to `poll_idle_max` (0.5 s), back to
10 ms as soon as a tick finds mail, so an idle garden costs a few sweeps a second. The
consumer calls `done()` after it has committed the message, which moves the file to
cur/ with the Maildir ":2,<flags>" suffix; until then the message stays in new/ and a
restarted pickup yields it again (nothing received is lost).

An agent may be able to write its own Maildir, so every walk here refuses symlinks below
the root: the address folder, tmp/ new/ cur/ and each message file are opened with
O_NOFOLLOW, relative to the descriptor of the folder above (`open_maildir`), never by a
path the kernel would resolve through a link. A symlinked folder raises `UnsafeMaildir`
(delivery: the garden answers 451 and writes nothing); the pickup skips and reports it
(`Pickup.skipped`). The root itself is the operator's and may be a link.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from envelopay.errors import ConfigError
from envelopay.mail.addresses import require_address
from envelopay.mail.dir_stamps import DirStamps
from envelopay.mail.inotify import Inotify
from envelopay.mail.line_ends import from_disk, to_disk

_SUBDIRS = ("tmp", "new", "cur")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_log = logging.getLogger("envelopay.garden")


class UnsafeMaildir(OSError):
    """A Maildir folder (the address folder, tmp/, new/ or cur/) is a symlink or not a
    directory: refused, nothing done through it."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(errno.ELOOP, "a symlink or not a directory; refused", str(path))


def _open_below(name: str, dir_fd: int, shown: Path) -> int:
    """The directory `name` inside `dir_fd` (-1: a path), never through a symlink."""
    try:
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=None if dir_fd < 0 else dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeMaildir(shown) from exc
        raise


def open_maildir(maildir: Path, *subs: str) -> list[int]:
    """Descriptors of `maildir`'s `subs` (or of `maildir` itself, given none), each opened
    relative to the one above without following a symlink: the address folder and its
    subfolders are the agent's to tamper with; their parent (the root) is not."""
    maildir = Path(maildir)
    # O_NOFOLLOW refuses a link in the last component only: the address folder. The
    # path above it (the root) resolves as the operator set it up.
    box = _open_below(str(maildir), -1, maildir) if maildir.name else os.open(maildir, _DIR)
    if not subs:
        return [box]
    fds: list[int] = []
    try:
        for sub in subs:
            fds.append(_open_below(sub, box, maildir / sub))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    finally:
        os.close(box)
    return fds


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def mailbox_path(root: Path, address: str) -> Path:
    """The Maildir of a garden address under `root` (the address must be valid)."""
    return Path(root) / require_address(address, field="mailbox address").lower()


def ensure_maildir(path: Path) -> Path:
    """Create `path` and its tmp/new/cur (parents included); return `path`. A symlink
    where the folder or a subfolder should be raises UnsafeMaildir (nothing is created
    through it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    parent = os.open(path.parent, _DIR)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, 0o700, dir_fd=parent)
        box = _open_below(path.name, parent, path)
    finally:
        os.close(parent)
    try:
        for sub in _SUBDIRS:
            with contextlib.suppress(FileExistsError):
                os.mkdir(sub, 0o700, dir_fd=box)
            os.close(_open_below(sub, box, path / sub))
    finally:
        os.close(box)
    return path


class _Names:
    """Unique Maildir file names; the clock and randomness are injectable."""

    def __init__(self, clock: Callable[[], float] = time.time, rand: Callable[[], str] | None = None) -> None:
        self._clock = clock
        self._rand = rand or (lambda: os.urandom(4).hex())  # as secrets.token_hex(4)
        self._count = 0
        self._host = socket.gethostname().replace("/", "\\057").replace(":", "\\072") or "localhost"

    def next(self) -> str:
        self._count += 1
        now = self._clock()
        sec = int(now)
        micro = int((now - sec) * 1_000_000)
        return f"{sec}.M{micro}P{os.getpid()}Q{self._count}R{self._rand()}.{self._host}"


_default_names = _Names()


def deliver_file(maildir: Path, data: bytes, *, fsync: bool = True, names: _Names | None = None) -> Path:
    """Write the message `data` (as received) into maildir/new atomically (tmp → link →
    new), with LF line ends when that is exact (`to_disk`); return the new path.
    Every step is relative to descriptors opened without following symlinks
    (`open_maildir`): a tampered Maildir raises UnsafeMaildir and nothing is written."""
    gen = names or _default_names
    data, suffix = to_disk(data)
    fds = open_maildir(maildir, "tmp", "new")
    tmp_dir, new_dir = fds
    try:
        for _ in range(8):
            name = gen.next() + suffix
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=tmp_dir)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                if fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(name, name, src_dir_fd=tmp_dir, dst_dir_fd=new_dir, follow_symlinks=False)
            except FileExistsError:
                os.unlink(name, dir_fd=tmp_dir)
                continue
            os.unlink(name, dir_fd=tmp_dir)
            if fsync:
                os.fsync(new_dir)
            return Path(maildir, "new", name)
    finally:
        _close(fds)
    raise OSError(f"could not find a unique Maildir name in {maildir}")


# ------------------------------------------------------------------- pickup


def _read_all(fd: int) -> bytes:
    """The whole file behind `fd` (pathlib's read_bytes costs more per small file)."""
    size = os.fstat(fd).st_size
    chunks = [os.read(fd, max(size, 1) + 1)]
    while chunks[-1]:
        chunks.append(os.read(fd, 65536))
    return b"".join(chunks)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message found in a Maildir's new/ directory; `raw` as received (CRLF)."""

    maildir: Path
    name: str
    raw: bytes

    @property
    def path(self) -> Path:
        return self.maildir / "new" / self.name


class Pickup:
    """Yield each new Maildir message once, as soon as it lands in new/.

    Use as `async with Pickup([maildir, ...]) as p: async for d in p: ...; p.done(d)`.
    `use_inotify=False` (or a platform without inotify) polls every `poll_interval` s,
    backing off to `poll_idle_max` s while idle (`next_poll_interval`).
    """

    def __init__(
        self,
        maildirs: Iterable[Path],
        *,
        use_inotify: bool = True,
        poll_interval: float = 0.01,
        poll_idle_max: float = 0.5,
    ) -> None:
        self._dirs = [Path(m) for m in maildirs]
        if not self._dirs:
            raise ConfigError("pickup needs at least one Maildir")
        self._use_inotify = use_inotify
        self._poll = poll_interval
        self._poll_max = max(poll_interval, poll_idle_max)
        self.interval = poll_interval  # the poll's current tick (it backs off while idle)
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()
        self._pending: set[tuple[Path, str]] = set()  # yielded or queued, not yet done
        self._notify: Inotify | None = None
        self._poller: asyncio.Task[None] | None = None
        self._listed: dict[Path, int] = {}  # new/ mtime (ns) when the poll last listed it
        self.mode = "inotify"
        self.skipped: list[str] = []  # symlinks refused (a folder or a message file), once each

    def _skip(self, path: Path | str, why: str) -> None:
        shown = f"{path}: {why}"
        if shown not in self.skipped:
            self.skipped.append(shown)
            _log.warning("maildir pickup: skipped %s", shown)

    async def __aenter__(self) -> Pickup:
        safe: list[Path] = []
        for d in self._dirs:
            try:
                ensure_maildir(d)
            except UnsafeMaildir as exc:
                self._skip(exc.filename, "a symlink or not a directory")
                continue
            safe.append(d)
        if not safe:
            raise ConfigError(f"pickup: no Maildir it may read ({'; '.join(self.skipped)})")
        self._dirs = safe
        if self._use_inotify:
            try:
                self._notify = Inotify()
                for d in self._dirs:
                    self._notify.watch(d / "new")
            except (OSError, AttributeError):
                if self._notify is not None:
                    self._notify.close()
                self._notify = None
        if self._notify is not None:
            asyncio.get_running_loop().add_reader(self._notify.fd, self._on_events)
        else:
            self.mode = "poll"
            self._poller = asyncio.get_running_loop().create_task(self._poll_loop())
        self._scan()  # the backlog, after the watch is in place so nothing slips between
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._notify is not None:
            asyncio.get_running_loop().remove_reader(self._notify.fd)
            self._notify.close()
            self._notify = None
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Delivery]:
        while True:
            yield await self._queue.get()

    async def next(self, timeout: float | None = None) -> Delivery:
        """The next delivery (waits up to `timeout` seconds; TimeoutError after)."""
        if not self._queue.empty():
            return self._queue.get_nowait()
        async with asyncio.timeout(timeout):  # no task per call, unlike wait_for
            return await self._queue.get()

    def done(self, delivery: Delivery, flags: str = "") -> Path | None:
        """Mark a delivery processed: move it to cur/ with Maildir info ':2,<flags>'.

        None when the file is gone already: another process sharing this Maildir
        picked the same file up and moved it first (both handled it; the consumers are
        idempotent), so there is nothing left to move. None too when new/ or cur/ has
        become a symlink: the message stays in new/ (skipped, reported)."""
        target = f"{delivery.name}:2,{''.join(sorted(set(flags)))}"
        self._pending.discard((delivery.maildir, delivery.name))
        try:
            fds = open_maildir(delivery.maildir, "new", "cur")
        except UnsafeMaildir as exc:
            self._skip(exc.filename, "a symlink or not a directory")
            return None
        except FileNotFoundError:
            return None
        try:
            os.rename(delivery.name, target, src_dir_fd=fds[0], dst_dir_fd=fds[1])
        except FileNotFoundError:
            return None
        finally:
            _close(fds)
        return delivery.maildir / "cur" / target

    def again(self, delivery: Delivery, after: float) -> None:
        """Offer a delivery left in new/ again in `after` seconds (if it is still there):
        another worker held it, and may die holding it."""
        self._pending.discard((delivery.maildir, delivery.name))
        asyncio.get_running_loop().call_later(after, self._offer, delivery.maildir, delivery.name)

    def _new(self, maildir: Path) -> int | None:
        """A descriptor of maildir/new reached without a symlink, or None (skipped)."""
        try:
            return open_maildir(maildir, "new")[0]
        except UnsafeMaildir as exc:
            self._skip(exc.filename, "a symlink or not a directory")
        except FileNotFoundError:
            pass
        return None

    def _offer(self, maildir: Path, name: str, new: int | None = None) -> bool:
        key = (maildir, name)
        if key in self._pending or name.startswith("."):
            return False
        held = new if new is not None else self._new(maildir)
        if held is None:
            return False
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=held)
        except FileNotFoundError:  # already taken by another reader
            return False
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            self._skip(maildir / "new" / name, "a symlink, not a message")
            return False
        finally:
            if new is None:
                os.close(held)
        try:
            raw = from_disk(name, _read_all(fd))
        finally:
            os.close(fd)
        self._pending.add(key)
        self._queue.put_nowait(Delivery(maildir, name, raw))
        return True

    def _list(self, maildir: Path) -> int:
        """Offer every file in maildir/new (listed through a descriptor); how many."""
        new = self._new(maildir)
        if new is None:
            return 0
        try:
            names = os.listdir(new)
            if self._pending:
                present = {(maildir, n) for n in names}
                # Forget entries that left new/ by other means, so the set stays bounded.
                self._pending = {k for k in self._pending if k[0] != maildir or k in present}
            return sum(self._offer(maildir, n, new) for n in sorted(names))
        finally:
            os.close(new)

    def _scan(self) -> None:
        for d in self._dirs:
            self._list(d)

    def _on_events(self) -> None:
        assert self._notify is not None
        events, overflow = self._notify.read()
        if overflow:
            self._scan()
            return
        for directory, name in events:
            self._offer(directory.parent, name)

    async def _poll_loop(self) -> None:
        stamps = DirStamps([os.path.join(d, "new") for d in self._dirs])
        try:
            verified = started = time.monotonic()
            while True:
                # A tick every `interval` from the start of the last one, not `interval`
                # after its sweep ended: a mail landing behind the sweep waits one tick,
                # however many directories the sweep covers.
                await asyncio.sleep(max(0.0, started + self.interval - time.monotonic()))
                started = time.monotonic()
                racy_before = time.time_ns() - _RACY_NS
                found = 0
                n = len(self._dirs)
                for start in range(0, n, _SWEEP_CHUNK):
                    offered = self._sweep(stamps, start, min(n, start + _SWEEP_CHUNK), racy_before)
                    if offered:  # the consumer takes it now, not after the whole sweep
                        found += offered
                        self.interval = self._poll
                        await asyncio.sleep(0)
                self.interval = next_poll_interval(self.interval, found > 0, self._poll, self._poll_max)
                if time.monotonic() - verified >= _VERIFY_EVERY:
                    stamps.verify()
                    verified = time.monotonic()
        finally:
            stamps.close()

    def _sweep(self, stamps: DirStamps, lo: int, hi: int, racy_before: int) -> int:
        """Part of a poll tick: the mtime of each new/ in [lo, hi), a listing of those
        that changed, their files offered; how many were offered."""
        listed = self._listed
        offered = 0
        for i in range(lo, hi):
            mtime = stamps.mtime_ns(i)
            if mtime is None:
                continue
            d = self._dirs[i]
            if listed.get(d) == mtime and mtime < racy_before:
                continue
            listed[d] = mtime
            offered += self._list(d)
        return offered


def next_poll_interval(current: float, found: bool, lo: float, hi: float) -> float:
    """The poll's next tick: back to `lo` when this tick found mail, else doubled up to `hi`."""
    return lo if found else min(hi, current * 2)


# A directory changed this recently may change again within the same mtime tick.
_RACY_NS = 1_000_000_000
_SWEEP_CHUNK = 128  # directories stat'ed between chances for the consumer to run
_VERIFY_EVERY = 1.0  # seconds between checks that each held new/ is still the one at its path
