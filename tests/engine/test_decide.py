"""The inbound path's decisions are pure (engine/decide.py): given the mail as read and
the ledger's answer to the claim, they return a plan, and touch nothing.

The engine under them is built over a real SQLite ledger that these tests never write
to: every assertion at the end checks the ledger is still empty, so a decision that
reached for I/O would show.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from envelopay.dkim import DkimResult
from envelopay.engine import Engine, decide
from envelopay.engine.inbound_mail import InboundMail, fallback_id
from envelopay.engine.step_facts import Work
from envelopay.flows import FlowKind, FlowState, Side
from envelopay.ledger.sqlite import SqliteStore
from envelopay.ledger.store import Begin, FlowRecord, ProofKey
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, Oops
from envelopay.protocol.parse import parse
from envelopay.testing import mock_rail as k
from envelopay.testing.mock_worker import WorkerApp

PASS = DkimResult("pass", domain="client.test", aligned=True, from_domain="client.test")


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    rail = k.DictRail({"t1": k.Tx(k.WORKER_WALLET, k.TOKEN, k.PRICE, time=k.T0 + timedelta(hours=1))})
    return Engine(
        SqliteStore(tmp_path / "ledger.db"),
        address=k.WORKER,
        domain="garden.test",
        rails={k.CHAIN: rail},
        app=WorkerApp(rail),
        clock=k.Clock(),
        id_factory=k.counter_ids("d"),
    )


def mail_of(message: Message, dkim: DkimResult | None = PASS) -> InboundMail:
    raw = k.raw(message)
    return InboundMail.of(parse(raw), dkim=dkim, fallback_message_id=fallback_id(raw), raw=raw)


def untouched(engine: Engine, mail: InboundMail) -> bool:
    """Nothing was written: no flow, no outcome for the mail."""
    assert mail.message_id is not None
    return (
        engine.store.list_flows(k.WORKER) == []
        and engine.store.inbound_outcome(k.WORKER, mail.message_id) is None
    )


def test_a_pay_is_admitted_with_its_proof_key_and_refused_early_without_a_rail(engine: Engine) -> None:
    admitted = decide.admit(mail_of(k.pay("pay_1", "T1")), "prefer", engine.rails)
    assert admitted.claimable and admitted.proof_key == ProofKey(k.CHAIN, "t1")
    elsewhere = decide.admit(mail_of(k.pay("pay_2", "t1", chain="nochain")), "prefer", engine.rails)
    assert not elsewhere.claimable and elsewhere.proof_key is None
    assert elsewhere.early is not None and elsewhere.early[0] is OopsCode.UNSUPPORTED_RAIL


def test_the_dkim_policy_refuses_defers_or_lets_through(engine: Engine) -> None:
    unsigned = mail_of(k.pay("pay_1", "t1"), dkim=DkimResult("none"))
    refused = decide.admit(unsigned, "required", engine.rails)
    assert refused.early is not None and refused.early[0] is OopsCode.DKIM_FAILED and not refused.claimable
    assert decide.admit(unsigned, "prefer", engine.rails).claimable
    lookup_failed = mail_of(k.pay("pay_1", "t1"), dkim=DkimResult("temperror"))
    assert decide.admit(lookup_failed, "required", engine.rails).deferred is not None


def test_the_dkim_label_rides_on_the_mail_and_never_on_the_next(engine: Engine) -> None:
    first = mail_of(k.order("ord_1")).labelled()
    second = mail_of(k.order("ord_2"), dkim=None).labelled()
    assert first.dkim_label == "pass, aligned"
    assert second.dkim_label is None  # the ContextVar this replaced carried the first one's over


def test_the_ledgers_answers_become_plans(engine: Engine) -> None:
    mail = mail_of(k.pay("pay_1", "t1", invoice_ref="inv_9"))
    admitted = decide.admit(mail, "prefer", engine.rails)
    now = engine.clock()
    seen = decide.plan(engine.settings, mail, admitted, Begin("seen", outcome={"status": "processed"}), now)
    assert isinstance(seen, decide.Recorded) and seen.outcome.repeat == "message_id"
    reused = decide.plan(engine.settings, mail, admitted, Begin("duplicate_id"), now)
    assert reused == decide.RefuseEarly((OopsCode.DUPLICATE_ID, "id reused with other content"), False)
    # A typed ref naming none of our messages: unknown_ref, its proof released unjudged.
    unknown = decide.plan(engine.settings, mail, admitted, Begin("new", missing_refs=("inv_9",)), now)
    assert isinstance(unknown, decide.RefuseEarly)
    assert unknown.problem is not None and unknown.problem[0] is OopsCode.UNKNOWN_REF
    assert (unknown.owns_replay, unknown.release) == (True, ProofKey(k.CHAIN, "t1"))
    assert untouched(engine, mail)


def test_an_order_opens_a_flow_and_an_oops_that_joins_nothing_is_silence(engine: Engine) -> None:
    mail = mail_of(k.order("ord_1"))
    admitted = decide.admit(mail, "prefer", engine.rails)
    step = decide.plan(engine.settings, mail, admitted, Begin("new"), engine.clock())
    assert isinstance(step, decide.StepFlow)
    assert (step.work.fs.kind, step.work.version, step.work.flow_id) == (FlowKind.ORDER, 0, "flow_d000001")
    assert step.step.ok and step.in_entry.protocol_id == "ord_1"
    oops = mail_of(Oops(note="no", ref="nothing_of_ours"))
    silent = decide.plan(
        engine.settings, oops, decide.admit(oops, "prefer", engine.rails), Begin("new"), engine.clock()
    )
    assert silent == decide.RefuseEarly(None, True, None)
    assert untouched(engine, mail)


def test_a_message_its_flow_refuses_is_a_misfit_with_the_state_as_it_was(engine: Engine) -> None:
    now = engine.clock()
    fulfilled = FlowRecord("flow_1", k.WORKER, k.BUYER, "order", "payee", "fulfilled", 3, {}, now, now)
    # Joined by its typed ref to a flow already fulfilled: that flow, whose table refuses it.
    mail = mail_of(k.pay("pay_1", "t1", invoice_ref="inv_1"))
    admitted = decide.admit(mail, "prefer", engine.rails)
    begin = Begin("new", ref_flows=(fulfilled,))
    misfit = decide.plan(engine.settings, mail, admitted, begin, now)
    assert isinstance(misfit, decide.Misfit) and not misfit.step.ok
    refusal = decide.misfit(misfit.work, misfit.step, admitted.proof_key, answer=True)
    assert (refusal.state, refusal.proof_fate, refusal.oops) == ("fulfilled", "release", misfit.step.oops)


def test_a_failed_proof_settles_on_a_refusal_not_a_commit(engine: Engine) -> None:
    mail = mail_of(k.pay("pay_1", "t1"))
    now = engine.clock()
    start = FlowState(FlowKind.ORDER, Side.PAYEE, "invoiced", {})
    work = Work(FlowState(FlowKind.ORDER, Side.PAYEE, "paid", {}), "flow_1", 2, k.BUYER, start=start)
    work.persist, work.oops, work.proof_fate = False, OopsCode.AMOUNT_MISMATCH, "release"
    entry = decide.in_entry_of(mail, k.pay("pay_1", "t1"), work, k.WORKER, now)
    settled = decide.settle(engine.settings, mail, work, ProofKey(k.CHAIN, "t1"), entry, now)
    assert not isinstance(settled, tuple)
    assert (settled.state, settled.oops, settled.proof_fate) == (
        "invoiced",
        OopsCode.AMOUNT_MISMATCH,
        "release",
    )
    work.persist, work.oops = True, None
    planned = decide.settle(engine.settings, mail, work, ProofKey(k.CHAIN, "t1"), entry, now)
    assert isinstance(planned, tuple)
    commit, outcome = planned
    assert outcome.status == "processed" and commit.flow is not None and commit.flow.record.state == "paid"
    assert commit.refs == ((k.BUYER, k.BUYER, "pay_1", "flow_1"),)
    assert untouched(engine, mail)
