"""A maintenance command never creates the store it was asked to maintain (issue 30 item
5): `enforcer compact --db sqlite:///var/enforcer.db` at a file that did not exist made an
empty store and reported `removed 0`. Each compact command, pointed at a store that is not
there, says so with its documented exit code and leaves nothing behind — on SQLite and on
PostgreSQL (a database without the store's tables)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import psycopg
from typer.testing import CliRunner

from envelopay.cli.app import app
from envelopay.config import load_config
from envelopay.enforcer.send.backends import open_store as open_enforcer_store
from envelopay.node.agent_node import open_store as open_ledger
from envelopay.node.init import init_agent

runner = CliRunner()


def _error(argv: list[str], code: int) -> dict[str, object]:
    res = runner.invoke(app, [*argv, "--json"])
    assert res.exit_code == code, res.output
    doc: dict[str, object] = json.loads(res.stdout)
    assert doc["exit"] == code and "nothing was created" in str(doc["detail"])
    return doc


def _tables(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    return [r[0] for r in rows]


def test_enforcer_compact_at_a_missing_sqlite_file(tmp_path: Path) -> None:
    db = tmp_path / "var" / "enforcer.db"
    db.parent.mkdir()
    doc = _error(["enforcer", "compact", "--db", f"sqlite:///{db}"], 2)
    assert doc["field"] == "--db" and "no such file" in str(doc["detail"])
    assert list(db.parent.iterdir()) == []  # no file, no -wal, no lock file
    db.touch()  # what the old command left: an empty file is not a store either
    assert "holds no enf_sends" in str(_error(["enforcer", "compact", "--db", str(db)], 2)["detail"])
    assert db.stat().st_size == 0


def test_enforcer_compact_on_a_real_store_still_runs(tmp_path: Path) -> None:
    db = tmp_path / "enforcer.db"

    async def make() -> None:
        store = open_enforcer_store(str(db))
        await store.open()
        await store.close()

    asyncio.run(make())
    res = runner.invoke(app, ["enforcer", "compact", "--db", str(db), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["sends"] == 0


def test_enforcer_compact_on_postgres_without_the_store(pg_dsn: str) -> None:
    doc = _error(["enforcer", "compact", "--db", pg_dsn], 2)
    assert "holds no enf_sends" in str(doc["detail"])
    assert _tables(pg_dsn) == []


def test_ledger_compact_at_a_ledger_not_made(tmp_path: Path) -> None:
    init_agent(tmp_path, address="worker@garden.local")
    ledger = tmp_path / "var" / "agent.db"
    assert not ledger.exists()
    doc = _error(["ledger", "compact", "-c", str(tmp_path / "envelopay.toml")], 3)
    assert (doc["error"], doc["field"]) == ("config", "ledger")
    assert not ledger.exists()


def test_ledger_compact_on_postgres_without_the_ledger(tmp_path: Path, pg_dsn: str) -> None:
    init_agent(tmp_path, address="worker@garden.local")
    cfg = tmp_path / "envelopay.toml"
    cfg.write_text(cfg.read_text().replace('ledger = "var/agent.db"', f'ledger = "{pg_dsn}"'))
    _error(["ledger", "compact", "-c", str(cfg)], 3)
    assert _tables(pg_dsn) == []
    store = open_ledger(pg_dsn, tmp_path)  # once the worker has made it, compact runs
    store.close()
    assert load_config(cfg).agent.ledger == pg_dsn
    res = runner.invoke(app, ["ledger", "compact", "-c", str(cfg), "--json"])
    assert res.exit_code == 0, res.output


def test_mail_compact_at_a_directory_without_a_mailbox(tmp_path: Path) -> None:
    where = tmp_path / "agent"
    doc = _error(["mail", "compact", "--dir", str(where)], 2)
    assert doc["field"] == "--dir"
    assert not where.exists()
    assert runner.invoke(app, ["mail", "check", "--dir", str(where)]).exit_code == 0  # makes it
    res = runner.invoke(app, ["mail", "compact", "--dir", str(where), "--json"])
    assert res.exit_code == 0, res.output
