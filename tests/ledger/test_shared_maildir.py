"""Two and four worker processes sharing one Maildir and one ledger, SIGKILLed at random
while they serve (issue 11, item 4), on SQLite and PostgreSQL.

Every worker sees every file (one Maildir), so they race for each message: the engine's
claim lets one step it, the others answer from its record, and whichever moves the file
second must just move on (before: its FileNotFoundError killed the pump, silently, and
the worker served nothing more). At the end every order has exactly one reply (one
INVOICE or one FULFILL), every reply was delivered, none twice under different
Message-IDs, and the inbox is empty.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tests.ledger.test_reliability import Target

from envelopay.mail.maildir import deliver_file, ensure_maildir
from envelopay.protocol.parse import parse
from envelopay.testing import mock_rail as k

ROOT = Path(__file__).resolve().parents[2]
# Run as a module from the repository root, so it imports its helper as tests.ledger._worker.
MODULE = "tests.ledger._maildir_worker"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    t = (
        Target("sqlite", str(tmp_path / "ledger.db"))
        if request.param == "sqlite"
        else Target("postgres", request.getfixturevalue("pg_dsn"))
    )
    t.init()
    return t


def _start(t: Target, wid: str, inbox: Path, replies: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", MODULE, t.backend, t.where, wid, str(inbox), str(replies)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _delivered(replies: Path) -> list[tuple[str, str, str]]:
    """(Message-ID, type, order_ref) of each reply file delivered."""
    out = []
    for f in (replies / "new").iterdir():
        # Read as any receiver does: our parser (the body holds the JSON more than once).
        got = parse(f.read_bytes())
        assert got.valid and got.message_id is not None and got.type is not None, f.name
        out.append((got.message_id, str(got.type.value), str(getattr(got.message, "order_ref", ""))))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("workers", [2, 4])
def test_shared_maildir_serves_every_order_once(target: Target, tmp_path: Path, workers: int) -> None:
    rng = random.Random(workers)
    inbox, replies = ensure_maildir(tmp_path / "inbox"), ensure_maildir(tmp_path / "replies")
    n = 40
    procs = {f"w{i}": _start(target, f"w{i}", inbox, replies) for i in range(workers)}
    kills = 0
    dead: list[subprocess.Popen[str]] = []
    for i in range(n):
        op = "free" if i % 2 else "echo"  # FULFILL at once, or an INVOICE
        deliver_file(
            inbox,
            k.raw(
                k.order(f"ord_{i}", op=op), sender=f"b{i % 5}@client.test", message_id=f"<o{i}@client.test>"
            ),
        )
        time.sleep(rng.random() * 0.03)
        if i % 8 == 7:  # SIGKILL one worker mid-run; restart it, half the time under a new id
            wid = rng.choice(sorted(procs))
            procs[wid].send_signal(signal.SIGKILL)
            procs[wid].wait(timeout=30)
            dead.append(procs.pop(wid))
            kills += 1
            new = wid if kills % 2 else f"{wid}r{kills}"
            procs[new] = _start(target, new, inbox, replies)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = target.rows(f"SELECT count(*) FROM ep_inbound WHERE local = '{k.WORKER}' AND status = 'done'")
        unsent = target.rows("SELECT count(*) FROM ep_outbox WHERE status <> 'sent'")
        if done[0][0] == n and unsent[0][0] == 0 and not list((inbox / "new").iterdir()):
            break
        time.sleep(0.2)
    else:  # served only by the final drain at SIGTERM would hide a stuck row or message
        pytest.fail(f"not settled in 120 s: {done[0][0]}/{n} done, {unsent[0][0]} unsent,"
                    f" {len(list((inbox / 'new').iterdir()))} left in new/")
    for p in procs.values():
        p.send_signal(signal.SIGTERM)
    for p in procs.values():
        _out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
    for p in dead:
        p.communicate(timeout=5)
    assert kills >= 4
    assert list((inbox / "new").iterdir()) == []  # every message filed
    rows = target.rows("SELECT message_id, type, body, status FROM ep_outbox")
    per_order = Counter(body["order_ref"] for _m, _t, body, _s in rows)
    assert per_order == Counter({f"ord_{i}": 1 for i in range(n)})  # exactly one reply each
    assert Counter(t for _m, t, _b, _s in rows) == Counter({"invoice": n // 2, "fulfill": n // 2})
    assert {s for *_x, s in rows} == {"sent"}
    delivered = _delivered(replies)
    by_order: dict[str, set[str]] = {}
    for mid, _type, ref in delivered:
        by_order.setdefault(ref, set()).add(mid)
    # None lost; a redelivery after a kill is the same reply (same Message-ID), never another.
    assert sorted(by_order) == sorted(f"ord_{i}" for i in range(n))
    assert all(len(m) == 1 for m in by_order.values())
