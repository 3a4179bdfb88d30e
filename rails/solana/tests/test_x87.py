"""LiteSVM and SQLite on one thread (envelopay_solana.x87): after the local chain runs an
SPL Token transaction, SQLite still prints floats and seeks INTEGER-against-REAL keys
right. Without the clearing, on x86-64 with SQLite 3.40 (Debian 12), `printf('%.1f',
2.5)` read 'NaN' and the seek below returned half its rows."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from envelopay_solana import x87
from envelopay_solana.local import LocalSolana


def _db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, at REAL NOT NULL)")
    db.execute("CREATE INDEX t_at ON t (at)")
    return db


def test_sqlite_reads_right_after_a_token_transaction_on_this_thread(tmp_path: Path) -> None:
    db = _db(tmp_path / "t.db")
    chain = LocalSolana()
    for n in range(1, 7):
        chain.new_wallet(sol=10**9, tokens={"USDC": 1_000})  # an ATA created and minted to: SPL Token
        db.execute("INSERT INTO t (at) VALUES (?)", (time.time() + n / 10,))
        assert db.execute("SELECT printf('%.1f', 2.5)").fetchone() == ("2.5",)
        # 0 is an INTEGER, the keys are REAL: SQLite compares them in long double
        got = [r[0] for r in db.execute("SELECT id FROM t WHERE at > 0 ORDER BY at")]
        assert got == list(range(1, n + 1))
        assert db.execute("SELECT count(*) FROM t WHERE at > 1700000000").fetchone() == (n,)


def test_clear_can_run_any_time() -> None:
    for _ in range(3):
        x87.clear()  # no dirty state to clear: nothing changes
    db = sqlite3.connect(":memory:")
    assert db.execute("SELECT printf('%.3f', 1796329534.411435), 3 < 3.5").fetchone() == ("1796329534.411", 1)
