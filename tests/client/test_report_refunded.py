"""The buyer's summary after a paid job failed and was refunded (seen on a new-user walk):
it said `the payment above was refused; the flow is back to refunded`, which reads as if
the worker had refused the money. The payment was taken and returned; the summary says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

from envelopay.client.buyer import Answer
from envelopay.client.commands import ClientRun
from envelopay.client.report import client_report
from envelopay.engine import BaseApplication, Engine
from envelopay.engine.outcome import Outcome, Sent
from envelopay.ledger.sqlite import SqliteStore
from envelopay.protocol.messages import Oops, OopsError, Pay

CLIENT = "client@garden.local"
WORKER = "worker@garden.local"


def _sent_pay(tmp_path: Path) -> Sent:
    store = SqliteStore(str(tmp_path / "client.db"))
    store.migrate()
    try:
        engine = Engine(store, address=CLIENT, domain="garden.local", rails={}, app=BaseApplication())
        pay = Pay(id="pay_r", amount=250_000, token="USDC", chain="solana-local", proof={"tx": "t1"})
        return asyncio.run(engine.send(pay, WORKER))
    finally:
        store.close()


def _lines(sent: Sent, state: str, code: str) -> tuple[str, ...]:
    oops = Oops(id="oops_r", ref="pay_r", note=code, error=OopsError(code=code))
    answer = Answer(message=oops, outcome=Outcome(status="processed", flow_id=sent.flow_id, state=state))
    return client_report("pay", ClientRun("PAY", sent, answer=answer), timeout=5, recipient="W1").lines


def test_a_refunded_flow_reads_as_refunded_and_a_refused_one_as_refused(tmp_path: Path) -> None:
    sent = _sent_pay(tmp_path)
    refunded = _lines(sent, "refunded", "task_failed")
    assert any("the work failed and the payment above was refunded" in line for line in refunded)
    assert not any("refused" in line for line in refunded)
    # An underpayment refunded in full (another client's PAY): no work failed; the code says why.
    underpaid = _lines(sent, "refunded", "amount_mismatch")
    assert any("the worker answered amount_mismatch and the payment above was refunded" in line
               for line in underpaid)
    refused = _lines(sent, "invoiced", "amount_mismatch")
    assert any("was refused; the flow is back to invoiced" in line for line in refused)
