"""`envelopay status FLOW` after the job ended (seen on a new-user walk): the buyer's last
WAIT said `running`, then OOPS task_failed came with the refund, and `status --no-ask`
still said the job was running beside a flow `refunded`. A FULFILL or OOPS task_failed
after the last WAIT ends the job as the ledger knows it; an OOPS refusing a PAY ends none."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from envelopay.client.buyer import Answer
from envelopay.client.commands import ClientRun
from envelopay.client.status import status_report
from envelopay.engine.outcome import Outcome, Sent
from envelopay.ledger.store import FlowRecord, LogEntry
from envelopay.protocol.messages import Oops, OopsError, Whatsup
from envelopay.protocol.outbound import Outbound

T0 = datetime(2026, 12, 4, 23, 51, 2, tzinfo=UTC)
AT = {"queued": "2026-12-04T23:51:02Z", "running": "2026-12-04T23:51:02Z"}
WAIT: dict[str, Any] = {"v": "0.1.0", "type": "wait", "id": "wait_1", "order_ref": "ord_1",
                        "state": "running", "at": AT}


def _entry(seq: int, kind: str, body: dict[str, Any]) -> LogEntry:
    return LogEntry("flow_1", T0 + timedelta(seconds=seq), "in", kind, f"<m{seq}@w>", None, "w@garden.local",
                    "b@garden.local", body, seq=seq)


def _flow(state: str) -> FlowRecord:
    return FlowRecord("flow_1", "b@garden.local", "w@garden.local", "order", "payer", state, 3, {}, T0, T0)


def _job(state: str, *later: tuple[str, dict[str, Any]]) -> tuple[Any, tuple[str, ...]]:
    log = [_entry(1, "wait", WAIT), *(_entry(n, k, b) for n, (k, b) in enumerate(later, start=2))]
    rep = status_report(_flow(state), log, asked=False, reason="--no-ask")
    return rep.document["job"], rep.lines


def test_the_job_ends_with_the_fulfill_or_the_oops_task_failed() -> None:
    refund = {"code": "task_failed", "refund": {"amount": "250000", "proof": {"tx": "t"}}}
    job, lines = _job("refunded", ("oops", {"type": "oops", "note": "x", "error": refund}))
    assert job["state"] == "refunded" and job["told"] is False
    assert job["at"] == {**AT, "refunded": "2026-12-04T23:51:04Z"}
    assert "ended: refunded (queued 2026-12-04T23:51:02Z, running 2026-12-04T23:51:02Z, " \
           "refunded 2026-12-04T23:51:04Z)" in lines
    job, _ = _job("paid", ("oops", {"type": "oops", "note": "x", "error": {"code": "task_failed"}}))
    assert job["state"] == "failed"
    job, _ = _job("fulfilled", ("fulfill", {"type": "fulfill", "result": {}}))
    assert job["state"] == "done"


def test_a_wait_after_the_end_or_an_oops_refusing_a_pay_keeps_the_wait() -> None:
    refused = {"type": "oops", "note": "x", "error": {"code": "amount_mismatch"}}
    job, lines = _job("invoiced", ("oops", refused))
    assert job == {"state": "running", "at": AT, "told": False}
    assert any(line.startswith("last told: running") for line in lines)
    done = {**WAIT, "state": "done", "at": {**AT, "done": "2026-12-04T23:51:05Z"}}
    job, _ = _job("fulfilled", ("fulfill", {"type": "fulfill", "result": {}}), ("wait", done))
    assert job["state"] == "done" and job["at"]["done"] == "2026-12-04T23:51:05Z"
    failed = _entry(1, "oops", {"type": "oops", "error": {"code": "task_failed"}})
    rep = status_report(_flow("refused"), [failed], asked=False, reason="--no-ask")
    assert rep.document["job"] is None  # no WAIT, no job told of: a strict worker's flow


def test_an_oops_that_ended_the_flow_meanwhile_is_named_with_its_code() -> None:
    # Seen on the walk: `status` read the refund's OOPS, which had arrived before the WHATSUP
    # went, as the answer and said only "the worker answered OOPS" — as if WHATSUP were refused.
    ask = Whatsup(id="wu_1", order_ref="ord_1")
    out = Outbound("b@garden.local", "w@garden.local", ask, "<wu1@b>", T0)
    oops = Oops(id="oops_1", note="task_failed: refunded 0.25 USDC", error=OopsError(code="task_failed"))
    answer = Answer(message=oops, outcome=Outcome("processed", "<o1@w>", flow_id="flow_1", state="refunded"))
    run = ClientRun("WHATSUP", Sent("flow_1", "refunded", "<wu1@b>", out), answer=answer)
    lines = status_report(_flow("refunded"), [], asked=True, reason=None, run=run).lines
    assert "the worker answered OOPS task_failed: refunded 0.25 USDC" in lines  # the note names the code
    plain = Answer(message=oops.model_copy(update={"note": "it broke"}), outcome=answer.outcome)
    run = ClientRun("WHATSUP", run.sent, answer=plain)
    lines = status_report(_flow("refunded"), [], asked=True, reason=None, run=run).lines
    assert "the worker answered OOPS task_failed: it broke" in lines
