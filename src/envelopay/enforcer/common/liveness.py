"""Whether another enforcer process on the same store is still alive.

A PAY is delivered by the process that moved its money (its instance is recorded with
the broadcast claim). Another process may deliver it only once that one is gone: it
crashed, or it was stopped. Each open store holds a lock named after its instance for
as long as it is open, and the kernel or the database drops that lock when the process
dies, so "can I take its lock?" is "is it dead?":

- SQLite: an exclusive `flock` on `<db>-wallet-locks/live-<instance>.lock` (the folder of
  the wallet locks, so the same host and directory rule applies);
- PostgreSQL: a session advisory lock on a key derived from the instance, held by a
  connection of its own (a pooled one would give the lock back to the pool).

A holder whose lock is lost while it lives (its file removed by hand, its PostgreSQL
session cut) looks dead: its PAY may then go twice, with one Message-ID, which the email
leg's at-least-once guarantee already allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import time
from typing import Any

from envelopay.enforcer.common.wallet_locks import advisory_key
from envelopay.errors import StoreError

__all__ = ["FileLiveness", "PgLiveness", "valid_instance"]

_INSTANCE = re.compile(r"[0-9a-f]{32}")


def valid_instance(instance: str) -> bool:
    """An instance id as stores make them (uuid4 hex): anything else names no process."""
    return bool(_INSTANCE.fullmatch(instance))


class FileLiveness:
    """The instance's lock file, held from `hold()` to `release()`."""

    def __init__(self, directory: str, instance: str) -> None:
        self.directory = directory
        self.instance = instance
        self._fd: int | None = None

    def _path(self, instance: str) -> str:
        return os.path.join(self.directory, f"live-{instance}.lock")

    def hold(self) -> None:
        """Take this instance's lock (and clear the files of dead ones)."""
        path = self._path(self.instance)
        try:
            os.makedirs(self.directory, mode=0o700, exist_ok=True)
            self._sweep()
            while True:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new name: nobody else holds it
                try:  # still the file at that path (a sweep may have unlinked it meanwhile)?
                    if os.stat(path).st_ino == os.fstat(fd).st_ino:
                        break
                except FileNotFoundError:
                    pass
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"liveness lock: {exc}") from exc
        self._fd = fd

    def _sweep(self, min_age: float = 60.0) -> None:
        """Remove the lock files of dead instances (a SIGKILLed process leaves its file),
        leaving any younger than `min_age` seconds to the process creating it."""
        now = time.time()
        with os.scandir(self.directory) as entries:
            for entry in entries:
                name = entry.name
                if not (name.startswith("live-") and name.endswith(".lock")):
                    continue
                with contextlib.suppress(OSError):
                    if now - entry.stat().st_mtime >= min_age:
                        self.alive(name[len("live-") : -len(".lock")])  # unlinks it if dead

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self._path(self.instance))
        os.close(self._fd)
        self._fd = None

    def alive(self, instance: str) -> bool:
        if instance == self.instance:
            return self._fd is not None
        if not valid_instance(instance):
            return False
        try:
            fd = os.open(self._path(instance), os.O_RDWR)
        except FileNotFoundError:
            return False  # it released its lock (stopped), or a checker found it dead
        except OSError as exc:
            raise StoreError(f"liveness check: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops a lock this check took
        # Dead: its file goes (another checker may race this unlink; it finds it dead too).
        with contextlib.suppress(OSError):
            os.unlink(self._path(instance))
        return False


class PgLiveness:
    """The instance's advisory lock on a connection of its own."""

    def __init__(self, dsn: str, instance: str) -> None:
        self.dsn = dsn
        self.instance = instance
        self._conn: Any = None

    async def hold(self) -> None:
        import psycopg  # lazy: keeps psycopg off this module's import

        try:
            conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
            await conn.execute("SELECT pg_advisory_lock(%s)", (advisory_key(f"live:{self.instance}"),))
        except (psycopg.Error, OSError) as exc:
            raise StoreError(f"postgres liveness lock: {exc}") from exc
        self._conn = conn

    async def release(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                # Unlocked before the close returns (the session's end would drop it too,
                # but only once the server has noticed the connection went).
                await self._conn.execute(
                    "SELECT pg_advisory_unlock(%s)", (advisory_key(f"live:{self.instance}"),)
                )
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    async def alive(self, pool: Any, instance: str, *, settle: float = 0.05) -> bool:
        """Asked on a pooled connection: the holder's own session would take its own
        lock again (advisory locks are reentrant within a session). A holder that died
        a moment ago still holds its lock until its server process has seen the
        connection close (milliseconds): a lock found held is asked about once more,
        `settle` seconds later. (This path runs only when a PAY's delivery would be
        taken over, never on a live call.)"""
        import psycopg  # lazy: keeps psycopg off this module's import

        if instance == self.instance:
            return self._conn is not None
        if not valid_instance(instance):
            return False
        key = advisory_key(f"live:{instance}")
        try:
            async with pool.connection() as conn:
                for wait in (0.0, settle):
                    await asyncio.sleep(wait)
                    cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                    row = await cur.fetchone()
                    if row is not None and row[0]:
                        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
                        return False
                return True
        except psycopg.Error as exc:
            raise StoreError(f"postgres liveness check: {exc}") from exc
