"""The application's part of a step, without I/O: which question an action asks, and
what the answer becomes in the flow.

`question` names the call (the driver, engine/actions.py, makes it and catches what it
raises); `apply` turns the decision into the step's working state: a reply the flow's
table takes (stepped "out", so the flow moves with it), an OOPS with the application's
code, an OOPS task_failed for a reply the table refuses, or silence. Nothing here reads
the ledger, a rail or the clock.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from envelopay import flows
from envelopay.engine.application import Application, Context, Refuse
from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.recorder import Recorder
from envelopay.engine.settings import EngineSettings
from envelopay.engine.step_facts import Work, order_of, stamp_invoice
from envelopay.flows import Action, Direction, FlowState
from envelopay.flows.core import with_excess
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Fulfill, Invoice, Message, Methods, Offer, Order, Pay, Which
from envelopay.rails.binding import BINDING_SCHEME

__all__ = ["Call", "apply", "context", "question"]

_log = logging.getLogger(__name__)

Call = Callable[[Application], Awaitable[Any]]


def context(settings: EngineSettings, work: Work, now: datetime) -> Context:
    """What the application is told about the flow it decides in."""
    return Context(
        local=settings.address,
        peer=work.peer,
        flow_id=work.flow_id,
        kind=work.fs.kind,
        state=work.fs.state,
        data=work.fs.data,
        now=now,
        new_id=settings.new_id,
        verdict=work.verdict,
    )


def question(action: Action, message: Message, work: Work, ctx: Context) -> Call | Refuse | None:
    """The call this action makes to the application, or the answer when there is
    nothing to ask (a FULFILL in a flow with no ORDER recorded; an action with no question)."""
    if action is Action.DECIDE_METHODS:
        assert isinstance(message, Which)
        which = message
        return lambda app: app.methods(which, ctx)
    if action is Action.DECIDE_ORDER:
        assert isinstance(message, Order)
        order, paid = message, work.verdict.observed_amount if work.verdict is not None else None
        return lambda app: app.order(order, ctx, paid=paid)
    if action is Action.FULFILL:
        assert isinstance(message, Pay)
        pay, recorded = message, order_of(work.fs.data)
        if recorded is None:
            return Refuse(OopsCode.TASK_FAILED, "no ORDER recorded in this flow")
        return lambda app: app.fulfill(recorded, pay, ctx)
    if action is Action.DECIDE_OFFER:
        assert isinstance(message, Offer)
        offer = message
        return lambda app: app.offer(offer, ctx)
    return None


def apply(recorder: Recorder, mail: InboundMail, decision: Any, work: Work, now: datetime) -> None:
    """The application's answer in the flow: an OOPS, silence, or a reply its table takes.
    A message answer arrives with its proof already bound (the driver binds it)."""
    if decision is None:
        return  # silence is always valid
    if isinstance(decision, OopsCode):
        decision = Refuse(decision)
    if isinstance(decision, Refuse):
        oops = recorder.oops(decision.code, decision.note, mail.protocol_id, decision.extra)
        work.replies.append(recorder.reply(mail, work.peer, oops, now))
        work.oops, work.detail = decision.code, decision.note
        refund = (decision.extra or {}).get("refund")
        if isinstance(refund, Mapping):  # money paid back is kept in the flow (SPEC.md "Refunds")
            work.fs = replace(work.fs, data={**work.fs.data, "refund": dict(refund)})
        return
    if isinstance(decision, Fulfill):  # an overpayment's excess paid back: said in the FULFILL
        decision = with_excess(decision, work.fs.data)
    if isinstance(decision, Invoice | Methods) and decision.binding is None:
        # Tell the payer what binding its proof must carry (SPEC.md "Proof binding").
        decision = decision.model_copy(update={"binding": BINDING_SCHEME})
    out_step = flows.step(work.fs, decision, Direction.OUT)
    if not out_step.ok:
        _log.error(
            "application answered %s, which the %s table refuses in state %s",
            decision.type,
            work.fs.kind,
            work.fs.state,
        )
        oops = recorder.oops(OopsCode.TASK_FAILED, "the worker could not answer", mail.protocol_id)
        work.replies.append(recorder.reply(mail, work.peer, oops, now))
        work.oops, work.detail = OopsCode.TASK_FAILED, f"illegal reply {decision.type}"
        return
    data = stamp_invoice(decision, out_step.data, now)
    work.fs = FlowState(work.fs.kind, work.fs.side, out_step.state, data)
    work.replies.append(recorder.reply(mail, work.peer, decision, now))
