"""Reliability of the ledger + engine, on SQLite and on PostgreSQL, with real processes.

- crash: a worker process is killed with SIGKILL at random points (>= 50 kills that
  landed, per backend) and restarted; at the end every message was processed once, no
  recorded reply is lost, no proof was accepted twice and no ORDER fulfilled twice.
  (About 20 of the kills land with messages left; once a phase's messages are all
  done, the later ones hit a worker that is opening the store with nothing to do.)
  The workers are forked from a server that has done their imports (tests/_zygote.py).
- concurrency: 4 worker processes share one ledger and handle 2,000 messages, 10% of
  them presenting an already-used proof and 5% redelivered: zero double-accepts, each
  message processed exactly once.
"""

from __future__ import annotations

import base64
import json
import random
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests._zygote import PIPE, Zygote

from envelopay.protocol.messages import Order, Pay
from envelopay.testing import mock_rail as k

WORKER_SCRIPT = Path(__file__).resolve().parent / "_worker.py"


@dataclass
class Target:
    backend: str
    where: str  # file path or DSN

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.backend == "sqlite":
            with sqlite3.connect(self.where) as conn:
                out = [
                    tuple(json.loads(v) if isinstance(v, str) and v[:1] in "{[" else v for v in r)
                    for r in conn.execute(sql).fetchall()
                ]
            return out
        with psycopg.connect(self.where) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]

    def init(self) -> None:
        # Create the schema once, before the workers race to open it.
        if self.backend == "sqlite":
            from envelopay.ledger.sqlite import SqliteStore

            SqliteStore(self.where).close()
        else:
            from envelopay.ledger.postgres import PostgresStore

            PostgresStore(self.where, max_size=1).close()


@pytest.fixture(scope="module")
def forks() -> Iterator[Zygote]:
    """The fork server for the worker processes (it only forks, so tests can share it)."""
    with Zygote(WORKER_SCRIPT) as z:
        yield z


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    if request.param == "sqlite":
        t = Target("sqlite", str(tmp_path / "ledger.db"))
    else:
        t = Target("postgres", request.getfixturevalue("pg_dsn"))
    t.init()
    return t


def _write(path: Path, raws: list[bytes]) -> str:
    path.write_text(json.dumps([base64.b64encode(r).decode() for r in raws]))
    return str(path)


def _buyer(i: int) -> str:
    return f"buyer{i % 7}@client.test"


def _prepaid(i: int, tx: str, sender: str, mid: str, wallet: str = "W-someone") -> bytes:
    # Bound by `wallet` (the test transactions are all paid by "W-someone").
    order = Order(
        v="0.2.0",
        id=f"ord_pp{i}",
        task={"op": "echo", "n": i},
        amount=k.PRICE,
        token=k.TOKEN,
        chain=k.CHAIN,
        proof={"tx": tx},
    )
    return k.raw(k.bind(order, wallet=wallet, sender=sender), sender=sender, message_id=mid)


def _unsolicited(i: int, tx: str, sender: str, mid: str, wallet: str = "W-someone") -> bytes:
    pay = Pay(id=f"pay_u{i}", amount=k.PRICE, token=k.TOKEN, chain=k.CHAIN, proof={"tx": tx})
    return k.raw(k.bind(pay, wallet=wallet, sender=sender), sender=sender, message_id=mid)


# ------------------------------------------------------------------- invariants


def _check_invariants(t: Target, message_ids: set[str]) -> dict[str, int]:
    inbound = t.rows(f"SELECT message_id, status, outcome FROM ep_inbound WHERE local = '{k.WORKER}'")
    by_mid = {r[0]: r for r in inbound}
    # Every message was processed, and exactly once (one claim row each, done).
    assert set(by_mid) == message_ids
    assert all(r[1] == "done" for r in inbound)
    # No recorded reply lost: every reply an outcome names is in the outbox.
    outbox_ids = {r[0] for r in t.rows("SELECT message_id FROM ep_outbox")}
    for _mid, _status, outcome in inbound:
        assert set(outcome.get("outbox", ())) <= outbox_ids
    # Each message entered its flow's log at most once.
    ins = Counter(r[0] for r in t.rows("SELECT message_id FROM ep_log WHERE direction = 'in'"))
    assert max(ins.values(), default=0) <= 1
    # No proof accepted twice: one ok verdict per proof key, across all messages.
    accepted = Counter(
        o["verdict"]["proof_key"]
        for _m, _s, o in inbound
        if o.get("status") == "processed" and o.get("verdict") and o["verdict"]["status"] == "ok"
    )
    assert max(accepted.values(), default=0) == 1
    spent = {r[0] for r in t.rows("SELECT proof_key FROM ep_proofs WHERE status = 'spent'")}
    assert set(accepted) <= spent
    # No ORDER fulfilled twice.
    fulfils = Counter(r[0]["order_ref"] for r in t.rows("SELECT body FROM ep_outbox WHERE type = 'fulfill'"))
    assert max(fulfils.values(), default=0) == 1
    return {"accepted": len(accepted), "fulfilled": len(fulfils), "messages": len(message_ids)}


# ------------------------------------------------------------------------ crash


def _run_with_kills(
    z: Zygote, t: Target, msgfile: str, n: int, ntx: int, kills: int, rng: random.Random
) -> int:
    """Run one worker over messages 0..n-1, SIGKILLing it `kills` times at random points.

    Each worker is a new process forked from `z`, which has done the worker's imports:
    the kills and restarts are real, the interpreter start and imports are paid once."""
    remaining = list(range(n))
    killed = 0
    while True:
        args = [t.backend, t.where, "node-1", msgfile, ",".join(map(str, remaining)), str(ntx)]
        proc = z.spawn(args, stdout=PIPE, stderr=PIPE)
        assert proc.stdout is not None
        if killed >= kills:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            done = {int(line.split()[0]) for line in out.splitlines()}
            assert done == set(remaining)
            return killed
        # Let it finish 0-3 messages, then kill it somewhere inside the next one.
        for _ in range(rng.randint(0, 3)):
            line = proc.stdout.readline()
            if not line:
                break
            remaining.remove(int(line.split()[0]))
        time.sleep(rng.random() * 0.004)
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        if proc.wait(timeout=60) == -signal.SIGKILL:
            killed += 1  # counted only if it landed: the worker may have finished first
        # Lines printed before the kill were committed; take them off the list.
        rest = proc.stdout.read()
        for line in rest.splitlines():
            remaining.remove(int(line.split()[0]))
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.slow
def test_crash_sigkill_at_random_points(forks: Zygote, target: Target, tmp_path: Path) -> None:
    rng = random.Random(4)
    n_orders, n_prepaid, n_unsolicited = 12, 10, 6
    ntx = 200
    raws: list[bytes] = []
    mids: set[str] = set()
    tx = iter(range(ntx))
    for i in range(n_orders):
        raws.append(k.raw(k.order(f"ord_{i}"), sender=_buyer(i), message_id=f"<o{i}@client.test>"))
    for i in range(n_prepaid):
        raws.append(_prepaid(i, f"tx-{next(tx)}", _buyer(i), f"<pp{i}@client.test>"))
    for i in range(n_unsolicited):
        raws.append(_unsolicited(i, f"tx-{next(tx)}", _buyer(i), f"<u{i}@client.test>"))
    raws += [raws[3], raws[n_orders + 2]]  # redelivered
    rng.shuffle(raws)
    raws.append(_prepaid(99, "tx-0", "mallory@evil.test", "<replay1@evil.test>"))  # a spent proof, replayed
    phase1 = _write(tmp_path / "phase1.json", raws)
    kills = _run_with_kills(forks, target, phase1, len(raws), ntx, 30, rng)

    # Phase 2: pay every INVOICE the worker wrote, threaded to it.
    invoices = target.rows("SELECT message_id, recipient, body FROM ep_outbox WHERE type = 'invoice'")
    assert len(invoices) == n_orders
    pays: list[bytes] = []
    first_pay_tx = None
    for j, (inv_mid, buyer, body) in enumerate(invoices):
        t = f"tx-{next(tx)}"
        first_pay_tx = first_pay_tx or t
        pays.append(
            k.raw(
                k.pay(f"pay_{j}", t, invoice_ref=body["id"]),
                sender=buyer,
                message_id=f"<p{j}@client.test>",
                in_reply_to=inv_mid,
            )
        )
    pays.append(pays[0])
    rng.shuffle(pays)
    pays.append(_unsolicited(77, first_pay_tx or "", "mallory@evil.test", "<replay2@evil.test>"))
    phase2 = _write(tmp_path / "phase2.json", pays)
    kills += _run_with_kills(forks, target, phase2, len(pays), ntx, 20, rng)
    assert kills >= 50

    all_mids = {f"<o{i}@client.test>" for i in range(n_orders)} | {
        f"<pp{i}@client.test>" for i in range(n_prepaid)
    }
    all_mids |= {f"<u{i}@client.test>" for i in range(n_unsolicited)} | {
        "<replay1@evil.test>",
        "<replay2@evil.test>",
    }
    all_mids |= {f"<p{j}@client.test>" for j in range(n_orders)}
    mids |= all_mids
    stats = _check_invariants(target, mids)
    # Every order was paid and fulfilled; every prepaid order fulfilled; the replays refused.
    assert stats["fulfilled"] == n_orders + n_prepaid
    assert stats["accepted"] == n_orders + n_prepaid + n_unsolicited
    states = Counter(r[0] for r in target.rows(f"SELECT state FROM ep_flows WHERE local = '{k.WORKER}'"))
    assert states["fulfilled"] == n_orders + n_prepaid and states["paid"] == n_unsolicited
    replays = target.rows(
        "SELECT outcome FROM ep_inbound WHERE message_id IN ('<replay1@evil.test>', '<replay2@evil.test>')"
    )
    assert [r[0]["oops"] for r in replays] == ["proof_replayed", "proof_replayed"]


# ------------------------------------------------------------------ concurrency


@pytest.mark.slow
def test_four_processes_2000_messages(forks: Zygote, target: Target, tmp_path: Path) -> None:
    rng = random.Random(7)
    n_unique, n_replay, n_redeliver = 1700, 200, 100
    raws: list[bytes] = []
    for i in range(n_unique):
        maker = _prepaid if i % 2 else _unsolicited
        raws.append(maker(i, f"tx-{i}", _buyer(i), f"<c{i}@client.test>"))
    for r in range(n_replay):  # 10%: a proof already presented, by someone else
        j = rng.randrange(n_unique)
        raws.append(
            _prepaid(10_000 + r, f"TX-{j}", f"mallory{r % 3}@evil.test", f"<r{r}@evil.test>", "W-mallory")
        )
    for _ in range(n_redeliver):  # 5%: the same mail delivered again
        raws.append(raws[rng.randrange(n_unique)])
    order = list(range(len(raws)))
    rng.shuffle(order)
    msgfile = _write(tmp_path / "msgs.json", raws)
    procs = []
    for w in range(4):  # forked after the imports: the four race from their first message
        mine = order[w::4]
        args = [target.backend, target.where, f"node-{w}", msgfile, ",".join(map(str, mine)), str(n_unique)]
        procs.append((forks.spawn(args, stdout=PIPE, stderr=PIPE), mine))
    for proc, mine in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert sorted(int(line.split()[0]) for line in out.splitlines()) == sorted(mine)

    mids = {f"<c{i}@client.test>" for i in range(n_unique)} | {f"<r{r}@evil.test>" for r in range(n_replay)}
    stats = _check_invariants(target, mids)
    assert stats["accepted"] == n_unique  # each proof accepted exactly once, by one message
    # A replay is refused: proof_replayed when the owner's message came first, else
    # payer_mismatch (the transfer is not Mallory's) and the proof left for its owner.
    outcomes = {r[0]: r[1] for r in target.rows("SELECT message_id, outcome FROM ep_inbound")}
    assert {outcomes[f"<r{r}@evil.test>"]["oops"] for r in range(n_replay)} <= {
        "proof_replayed",
        "payer_mismatch",
    }
    # The FULFILLs went to exactly the prepaid ORDERs (odd <c..>), never to a replay.
    winners = [m for m, o in outcomes.items() if o.get("verdict") and o["verdict"]["status"] == "ok"]
    assert all(m.startswith("<c") for m in winners)
    assert stats["fulfilled"] == n_unique // 2
