"""A job runner in a process of its own, for the SIGKILL tests: python -m tests.worker._job_proc
BACKEND WHERE OWNER TASK_JSON — runs the jobs of k.WORKER on the ledger at WHERE (a
SQLite path or a PostgreSQL DSN) under OWNER, with a 1 s lease, until killed."""

from __future__ import annotations

import asyncio
import json
import sys

from tests.worker import _jobs_kit as jk

from envelopay.ledger.store import Store


def _store(backend: str, where: str) -> Store:
    if backend == "sqlite":
        from envelopay.ledger.sqlite import SqliteStore  # lazy: one backend per process

        return SqliteStore(where)
    from envelopay.ledger.postgres import PostgresStore  # lazy: one backend per process

    return PostgresStore(where, max_size=4)


async def main(backend: str, where: str, owner: str, task: str) -> None:
    store = _store(backend, where)
    engine = jk.worker(store, jk.config(json.loads(task)), worker_id=owner)
    runner = jk.runner(engine, owner=owner, lease=1.0)
    print("ready", flush=True)
    await runner.run(asyncio.Event())


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
