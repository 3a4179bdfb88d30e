"""Refunds are paid at most once, on both chains (LiteSVM, eth-tester) and both ledgers:
a redo returns the first proof, a refund left in doubt at each point of a payment is
recovered by the next ask without a second transfer, and a refused one moves nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from envelopay.devnet.plugins import LocalWorld, dev_chain
from envelopay.ledger.jobs import Job
from envelopay.ledger.postgres import PostgresStore
from envelopay.ledger.refunds import RefundBook, RefundOrder
from envelopay.ledger.sqlite import SqliteStore
from envelopay.rails.registry import make
from envelopay.worker.refund_policy import RefundOnFailure
from envelopay.worker.refunds import CRASH_POINTS, Refunder, own_key_payer, refund_fields, refunder_for

USDC = 1_000_000


class Crash(Exception):
    """Stands for the process dying at a point (the SIGKILL test kills a real process)."""


@pytest.fixture(params=["solana", "base"])
def chain(request: pytest.FixtureRequest) -> LocalWorld:
    return dev_chain(str(request.param)).local()


def _refunder(world: LocalWorld, book: RefundBook, key: bytes, *, crash: str | None = None,
              owner: str = "worker-1", lease: timedelta = timedelta(minutes=2)) -> Refunder:
    rail = make(world.chain.split("-")[0], world.rail_options(key))
    payer = own_key_payer({world.chain: rail}, {world.chain: key})

    def hook(point: str) -> None:
        if point == crash:
            raise Crash(point)

    return Refunder(book, payer, owner=owner, crash=hook, lease=lease)


def _order(world: LocalWorld, to: str, amount: int, key: str = "job:job_1") -> RefundOrder:
    return RefundOrder(key=key, local="worker@garden.local", peer="buyer@garden.local", flow_id="flow_1",
                       chain=world.chain, token="USDC", amount=amount, recipient=to, reason="task_failed")


def _funded(world: LocalWorld) -> tuple[bytes, Callable[[], int | None], str]:
    worker = world.new_wallet(native=10**18 if world.chain.startswith("base") else 2 * 10**9, usdc=5 * USDC)
    buyer = world.new_wallet(native=10**9, usdc=0)
    return worker.key, lambda: world.usdc_balance(buyer.address), buyer.address


async def test_a_refund_pays_once_and_a_redo_returns_the_same_proof(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    key, balance, to = _funded(chain)
    book = RefundBook(ledger, now=datetime.now(UTC))
    refunder = _refunder(chain, book, key)
    first = await refunder.refund(_order(chain, to, 2 * USDC))
    assert first.status == "paid" and first.refund is not None and first.refund.proof
    assert balance() == 2 * USDC
    again = await _refunder(chain, book, key, owner="worker-2").refund(_order(chain, to, 2 * USDC))
    assert again.status == "paid" and again.refund is not None
    assert again.refund.proof == first.refund.proof
    assert balance() == 2 * USDC  # not paid twice
    fields = refund_fields(first.refund)["refund"]
    assert fields["amount"] == str(2 * USDC) and fields["wallet"] == to
    assert fields["proof"] == first.refund.proof


@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_refund_in_doubt_is_recovered_without_a_second_transfer(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld, point: str
) -> None:
    key, balance, to = _funded(chain)
    book = RefundBook(ledger, now=datetime.now(UTC))
    with pytest.raises(Crash):  # a short lease: the next process takes it over at once
        await _refunder(chain, book, key, crash=point, lease=timedelta(0)).refund(_order(chain, to, USDC))
    row = book.get("job:job_1")
    assert row is not None and row.status in ("paying", "signed")
    # The worker restarted: it recovers the dead process's row, asking the chain first.
    done = await _refunder(chain, book, key).recover("worker@garden.local")
    assert [r.status for r in done] == ["paid"]
    assert balance() == USDC
    assert (await _refunder(chain, book, key).refund(_order(chain, to, USDC))).status == "paid"
    assert balance() == USDC


async def test_a_live_refund_is_busy_for_another_process_until_its_lease_runs_out(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    key, balance, to = _funded(chain)
    book = RefundBook(ledger, now=datetime.now(UTC))
    with pytest.raises(Crash):
        await _refunder(chain, book, key, crash="after_sign").refund(_order(chain, to, USDC))
    other = _refunder(chain, book, key)  # the same worker's next process, the first one's lease alive
    busy = await other.refund(_order(chain, to, USDC))
    assert busy.status == "pending" and balance() in (None, 0)
    later = datetime.now(UTC) + timedelta(minutes=6)  # past the first owner's lease
    other.clock = lambda: later
    assert (await other.refund(_order(chain, to, USDC))).status == "paid"
    assert balance() == USDC


async def test_a_refused_refund_moves_nothing_and_may_be_asked_again(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    key, balance, to = _funded(chain)
    book = RefundBook(ledger, now=datetime.now(UTC))
    refunder = _refunder(chain, book, key)
    poor = await refunder.refund(_order(chain, to, 50 * USDC))  # the worker holds 5
    assert poor.status == "failed" and "insufficient" in poor.detail
    assert balance() in (None, 0)
    row = book.get("job:job_1")
    assert row is not None and row.status == "failed" and row.tx_id is None
    chain.fund(_address(chain, key), usdc=50 * USDC)
    assert (await refunder.refund(_order(chain, to, 50 * USDC))).status == "paid"
    assert balance() == 50 * USDC


def _address(world: LocalWorld, key: bytes) -> str:
    rail: Any = make(world.chain.split("-")[0], world.rail_options(key))
    payer = own_key_payer({world.chain: rail}, {world.chain: key}).payers[world.chain]
    return payer.address_of(key)


async def test_the_table_is_its_own_component_of_the_one_migrator(
    ledger: SqliteStore | PostgresStore,
) -> None:
    RefundBook(ledger, now=datetime.now(UTC))
    RefundBook(ledger, now=datetime.now(UTC))  # a second open applies nothing again
    with ledger.read() as x:
        rows = x.all("SELECT component, version FROM ep_versions WHERE component = 'refunds'")
    assert [(r["component"], int(r["version"])) for r in rows] == [("refunds", 1)]


def _job(
    world: LocalWorld, payer: str, *, state: str = "failed", policy: str = "refund", amount: int = USDC
) -> Job:
    now = datetime.now(UTC)
    return Job(job_id="job_7", local="worker@garden.local", peer="buyer@garden.local", flow_id="flow_7",
               task="review", params={}, order_id="o7", ref="p7", message_id="<p7@garden.local>",
               chain=world.chain if amount else None, token="USDC" if amount else None, amount=amount,
               payer=payer, proof={"tx": "t"}, proof_key="t", policy=policy, idempotent=False, state=state,
               attempts=1, created_at=now, updated_at=now, error="handler raised ValueError", at={})


async def test_the_failure_policy_refunds_a_paid_job_once_holds_a_hold_task_and_answers_a_free_one(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    key, balance, to = _funded(chain)
    policy = RefundOnFailure(_refunder(chain, RefundBook(ledger, now=datetime.now(UTC)), key))
    free = await policy.on_failed(_job(chain, to, amount=0))
    assert free.state == "failed" and free.answer and not free.oops
    held = await policy.on_failed(_job(chain, to, policy="hold"))
    assert held.state == "held" and not held.answer and balance() in (None, 0)
    for _ in range(2):  # asked again after a crash: the same refund, not a second one
        done = await policy.on_failed(_job(chain, to))
        assert done.state == "refunded" and done.answer
        assert done.oops["refund"]["amount"] == str(USDC) and done.oops["refund"]["proof"]
        assert done.fields["refund"] == done.oops["refund"]
        assert balance() == USDC
    # The operator's choice for a held job (state refunding): the same key, paid once.
    operator = await policy.on_failed(_job(chain, to, state="refunding", policy="hold"))
    assert operator.state == "refunded" and balance() == USDC


async def test_a_refund_that_cannot_be_made_holds_the_job_for_the_operator(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    key, balance, to = _funded(chain)
    policy = RefundOnFailure(_refunder(chain, RefundBook(ledger, now=datetime.now(UTC)), key))
    poor = await policy.on_failed(_job(chain, to, amount=50 * USDC))
    assert poor.state == "held" and not poor.answer
    assert poor.fields["refund"]["status"] == "failed" and "insufficient" in poor.fields["refund"]["error"]
    assert balance() in (None, 0)


async def test_the_refund_note_a_person_reads_says_the_amount_in_the_assets_units(
    ledger: SqliteStore | PostgresStore, chain: LocalWorld
) -> None:
    # The note is the OOPS's subject: `refunded 1 USDC`, never the smallest units (issue 30).
    key, _balance, to = _funded(chain)
    rail = make(chain.chain.split("-")[0], chain.rail_options(key))
    refunder = refunder_for(ledger, rails={chain.chain: rail}, keys={rail.name: key})
    done = await RefundOnFailure(refunder).on_failed(_job(chain, to))
    assert done.state == "refunded"
    assert f"refunded 1 USDC on {chain.chain} to {to}" in (done.note or "")
    assert str(USDC) not in (done.note or "") and done.oops["refund"]["amount"] == str(USDC)
