"""One deliverer per PAY across enforcer processes on one store (SQLite and PostgreSQL).

The process that claims a payment's broadcast records itself as the PAY's deliverer
(enforcer/common/liveness.py). Another process on the same store — a `check_payment_status`, a
retried call or its finisher — delivers that PAY only once the deliverer is gone: two
live deliverers would both send it. "Another process" is a second store object on the
same database (its own instance and liveness lock); a real SIGKILL is covered by
test_payment_crashes.py and by the subprocess test at the end.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from envelopay.enforcer.send.backends import PostgresStore, SqliteStore
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.send.store import EnforcerStore
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.mail.transport.smtp import SmtpConfig
from envelopay.mail.transport.submission import SmtpTransport

from .conftest import Clock, Sink
from .paykit import CHAIN, USDC, VAULT_SECRET, Kit, greylisted, make_kit, pay_req, payee_wallet


def _second_store(store: EnforcerStore) -> EnforcerStore:
    """Another store object on the same database: what a second process would open."""
    if isinstance(store, SqliteStore):
        return SqliteStore(store.path)
    assert isinstance(store, PostgresStore)
    return PostgresStore(store.dsn)


async def _other_process(kit: Kit, store: EnforcerStore, sink: Sink, clock: Clock) -> Payments:
    from envelopay.enforcer.spend.vault import Vault

    await store.open()
    deliverer = SmtpTransport(SmtpConfig("127.0.0.1", sink.port, security="none", max_attempts=1))
    enforcer = Enforcer(store, deliverer, clock=clock)
    pstore = PaymentStore(store)
    await pstore.open()
    return Payments(enforcer, pstore, Vault(VAULT_SECRET), {CHAIN: kit.payer}, crash_hook=lambda _p: None)


async def _wait_until(check: Callable[[], Awaitable[bool]], want: bool, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while await check() != want:
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def _wait_for(predicate: object, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():  # type: ignore[operator]
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


async def test_a_pay_another_live_process_is_delivering_is_not_delivered_again(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    kit = await make_kit(enforcer)
    token, address = await kit.agent()
    other_store = _second_store(enforcer.store)
    other = await _other_process(kit, other_store, sink, clock)
    try:
        sink.data_delay = 1.0  # the payee's server takes its time with the PAY's verdict
        call = asyncio.create_task(kit.payments.submit("pay", token, pay_req(payee_wallet(), USDC)))
        # The live call is waiting for the verdict on its PAY (the sink holds it, having
        # read the final dot, which goes only after the broadcast). Its envelope was
        # opened earlier, while the payment was signed: RCPT TO alone says too little.
        await _wait_for(lambda: sink.peers)
        rows = await enforcer.store.execute_sql("SELECT id, state, deliverer FROM enf_payments", ())
        [(intent_id, state, deliverer)] = rows
        assert state == "BROADCAST" and deliverer == enforcer.store.instance
        # The agent asks the other process meanwhile: the money moved, the chain confirms it,
        # and the deliverer is alive: the other process does not send the PAY a second time.
        seen = await other.status(token, intent_id)
        assert seen.status == "unknown" and seen.state == "paid" and seen.message_id is None, seen
        assert len(sink.rcpts) == 1  # it did not even open a transaction
        done = await call
        assert done.status == "paid_and_sent", done
        assert (await other.status(token, intent_id)).status == "paid_and_sent"
        assert len(sink.messages) == 1 and len(sink.rcpts) == 1
        assert kit.payment_txs(address) == [done.tx_id]
    finally:
        await other_store.close()


class _Died(BaseException):
    """Stands for the process's death at a crash point (in-process: nothing after it runs)."""


async def test_a_pay_whose_deliverer_died_is_delivered_by_another_process(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    first_store = _second_store(enforcer.store)
    first = await _other_process(await make_kit(enforcer), first_store, sink, clock)
    kit = await make_kit(enforcer, chain=None)
    first.payers = {CHAIN: kit.payer}
    token, address = await kit.agent()

    def die(point: str) -> None:
        if point == "after_record":  # the chain confirmed; the PAY not yet sent
            raise _Died(point)

    first.crash = die
    with pytest.raises(_Died):
        await first.submit("pay", token, pay_req(payee_wallet(), USDC))
    [(intent_id, state, deliverer)] = await enforcer.store.execute_sql(
        "SELECT id, state, deliverer FROM enf_payments", ()
    )
    assert state == "BROADCAST" and deliverer == first_store.instance
    # While its deliverer lives (its store is open), nobody else sends the PAY.
    waiting = await kit.payments.status(token, intent_id)
    assert (waiting.status, waiting.state) == ("unknown", "paid") and sink.messages == []
    await first_store.close()  # the first process is gone: its liveness lock with it
    done = await kit.payments.status(token, intent_id)
    assert done.status == "paid_and_sent" and done.message_id, done
    assert len(sink.messages) == 1 and kit.payment_txs(address) == [done.tx_id]
    [(owner,)] = await enforcer.store.execute_sql("SELECT deliverer FROM enf_payments", ())
    assert owner == enforcer.store.instance  # taken over, by compare-and-set


async def test_a_pay_whose_delivery_failed_is_left_for_any_process(
    enforcer: Enforcer, sink: Sink, clock: Clock
) -> None:
    kit = await make_kit(enforcer)
    token, _, d = await greylisted(kit, sink)
    [(deliverer,)] = await enforcer.store.execute_sql("SELECT deliverer FROM enf_payments", ())
    assert deliverer is None  # let go: the finisher of any process may deliver it
    other_store = _second_store(enforcer.store)
    other = await _other_process(kit, other_store, sink, clock)
    try:
        sink.fail_with = None
        assert (await other.status(token, d.id)).status == "paid_and_sent"
        assert len(sink.messages) == 1
    finally:
        await other_store.close()


async def test_an_older_payments_table_gains_the_new_columns(enforcer: Enforcer) -> None:
    from envelopay.enforcer.spend import schema as payment_store

    store = enforcer.store
    [table] = [s for s in payment_store.SCHEMA if "TABLE IF NOT EXISTS enf_payments" in s]
    added = [f"{name} {kind}," for name, kind in payment_store._ADDED]
    assert all(a in table for a in added)
    older = "\n".join(line for line in table.splitlines() if line.strip() not in added)
    await store.execute_sql(older, ())  # the table as the previous release made it
    await PaymentStore(store).open()
    await PaymentStore(store).open()  # twice: the second finds them there
    sql = ("SELECT name FROM pragma_table_info('enf_payments')" if isinstance(store, SqliteStore) else
           "SELECT column_name FROM information_schema.columns"
           " WHERE table_schema = current_schema() AND table_name = 'enf_payments'")
    names = {r[0] for r in await store.execute_sql(sql, ())}
    assert {"deliverer", "compacted_at"} <= names


_HOLDER = """
import sys, time, asyncio
from envelopay.enforcer.send.backends import open_store
async def main():
    store = open_store(sys.argv[1])
    await store.open()
    print(store.instance, flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_store_is_alive_until_its_process_is_killed(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = str(tmp_path / "enf.db") if backend == "sqlite" else request.getfixturevalue("pg_dsn")
    me: EnforcerStore = SqliteStore(url) if backend == "sqlite" else PostgresStore(url)
    await me.open()
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, url], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        other = proc.stdout.readline().strip()
        assert await me.alive(other) and await me.alive(me.instance)
        assert not await me.alive("0" * 32)  # never opened
        assert not await me.alive("../../etc/passwd")  # not an instance id: names no process
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The kernel drops a file lock as the process ends; PostgreSQL drops an advisory
        # lock once the server has noticed the connection is gone (soon after).
        await _wait_until(lambda: me.alive(other), False)
        if backend == "sqlite":  # the dead one's lock file is cleared by the check that found it
            assert not (tmp_path / "enf.db-wallet-locks" / f"live-{other}.lock").exists()
    finally:
        proc.kill()
        proc.wait()
        await me.close()


async def test_opening_a_store_clears_the_lock_files_of_dead_instances(tmp_path: Path) -> None:
    import os

    from envelopay.enforcer.common.liveness import FileLiveness

    locks = tmp_path / "enf.db-wallet-locks"
    locks.mkdir()
    held = FileLiveness(str(locks), "a" * 32)
    held.hold()  # a live process's lock
    dead_old, dead_young = locks / f"live-{'b' * 32}.lock", locks / f"live-{'c' * 32}.lock"
    dead_old.touch()  # left by a SIGKILLed process an hour ago
    dead_young.touch()  # as if its process were creating it right now
    wallet = locks / "0123.lock"  # a wallet lock: not the sweep's
    wallet.touch()
    for path in (dead_old, locks / f"live-{'a' * 32}.lock", wallet):
        os.utime(path, (1.0, 1.0))
    store = SqliteStore(tmp_path / "enf.db")
    await store.open()
    try:
        left = sorted(p.name for p in locks.iterdir())
        assert left == sorted(["0123.lock", f"live-{'a' * 32}.lock", dead_young.name,
                               f"live-{store.instance}.lock"])
        assert await store.alive("a" * 32) and not await store.alive("c" * 32)
    finally:
        await store.close()
        held.release()
    assert not (locks / f"live-{store.instance}.lock").exists()  # a clean close takes its file
