"""A poll of the worker console reads the ledger's counts again only when its change mark
moved (a new flow, a new outbox row) or its last read grew old: an open tab costs two index
steps per poll, not a count of every flow (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Commit, FlowRecord, FlowWrite
from envelopay.ledger.summaries import FlowCount
from envelopay.node.console import REREAD, Console, start_console
from envelopay.rails.amounts import no_decimals

LOCAL = "worker@polls.test"
T0 = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


class CountingSqlite(SqliteStore):
    counted = 0

    def flow_counts(self, local: str) -> list[FlowCount]:
        self.counted += 1
        return super().flow_counts(local)


class CountingPostgres(PostgresStore):
    counted = 0

    def flow_counts(self, local: str) -> list[FlowCount]:
        self.counted += 1
        return super().flow_counts(local)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CountingSqlite | CountingPostgres]:
    made = (CountingSqlite(tmp_path / "l.db") if request.param == "sqlite"
            else CountingPostgres(request.getfixturevalue("pg_dsn"), max_size=2))
    yield made
    made.close()


def write_flow(store: SqliteStore | PostgresStore, n: int) -> None:
    at = T0 + timedelta(seconds=n)
    record = FlowRecord(f"flow_{n}", LOCAL, "b@x", "order", "payee", "ordered", 0, {}, at, at)
    assert store.commit_step(Commit(LOCAL, at, {"status": "processed"}, flow=FlowWrite(record))) == "ok"


async def test_polls_read_the_counts_only_when_the_mark_moved(
    store: CountingSqlite | CountingPostgres,
) -> None:
    now = [T0]
    console = Console(store, LOCAL, no_decimals, clock=lambda: now[0])
    runner, url = await start_console(console, "127.0.0.1", 0)
    try:
        async with httpx.AsyncClient() as http:
            async def poll() -> dict[str, str]:
                got = await http.get(url + "/live.json", params={"version": "-"})
                assert got.status_code == 200
                return dict(got.json())

            write_flow(store, 1)
            first = await poll()
            assert store.counted == 1 and "flow_1" in first["html"]
            for _ in range(5):
                assert await poll() == first
            assert store.counted == 1  # nothing moved: the read served every poll
            write_flow(store, 2)
            moved = await poll()
            assert store.counted == 2 and "flow_2" in moved["html"] and moved["version"] != first["version"]
            now[0] += timedelta(seconds=REREAD + 1)  # nothing moved, but the read is old
            assert await poll() == moved
            assert store.counted == 3
            page = await http.get(url, params={"state": "ordered"})  # another filter: its own read
            assert page.status_code == 200 and "flow_2" in page.text and store.counted == 4
    finally:
        await runner.cleanup()
