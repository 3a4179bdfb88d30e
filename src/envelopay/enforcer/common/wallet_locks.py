"""One payment at a time per wallet, across every enforcer process on one store.

Between "latest blockhash / next nonce" and "broadcast, confirmed", a second payment from
the same wallet must wait: two Solana payments signed against one blockhash for the same
amount and payee are one transaction, and two Base payments given one nonce are one
payment. The per-process asyncio lock covers the tasks of one process; the store lock
covers the processes. Both store locks die with the process that holds them (a file lock
is dropped by the kernel, a PostgreSQL advisory lock with its session), so a SIGKILLed
enforcer never leaves a wallet locked: the next one takes the lock and recovers from the
intent's recorded state.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

from envelopay.errors import StoreError

__all__ = ["advisory_key", "file_lock", "pg_advisory_lock"]

_POLL = 0.002  # seconds between tries of a held file lock (payments hold it for milliseconds)


def advisory_key(name: str) -> int:
    """A signed 64-bit key for pg_advisory_lock, stable across processes."""
    digest = hashlib.sha256(b"envelopay-wallet-lock:" + name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.asynccontextmanager
async def file_lock(directory: str, name: str) -> AsyncIterator[None]:
    """An exclusive flock on DIRECTORY/<hash of name>; polled so the event loop never blocks."""
    path = os.path.join(directory, hashlib.sha256(name.encode()).hexdigest()[:32] + ".lock")
    try:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:  # the first lock on this store (or its folder was removed)
            os.makedirs(directory, mode=0o700, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise StoreError(f"wallet lock: {exc}") from exc
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await asyncio.sleep(_POLL)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.asynccontextmanager
async def pg_advisory_lock(pool: Any, name: str, slots: asyncio.Semaphore) -> AsyncIterator[None]:
    """A session advisory lock on one pooled connection, held for the block. If the unlock
    fails the pool drops the broken connection, and the session's end releases the lock.
    `slots` bounds how many connections lock holders pin at once."""
    import psycopg  # lazy: keeps psycopg off this module's import

    key = advisory_key(name)
    try:
        async with slots, pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
    except psycopg.Error as exc:
        raise StoreError(f"postgres wallet lock: {exc}") from exc
