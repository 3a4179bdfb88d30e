"""The driver of a step's actions: the I/O the flow table's plan asks for.

`flows.step` says what a message sets in motion (`Step.actions`): verify its proof, ask
the application a question (METHODS, an ORDER, a FULFILL, an OFFER), tell it after the
commit (NOTIFY), verify a refund. `ActionDriver.run` does each in order and records the
result on the step's `Work`; nothing is written until the one commit (engine/inbound.py).
No write transaction is open while a rail verifies or the application decides.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from envelopay.engine import answers
from envelopay.engine.application import Enqueue, Notice, Refuse
from envelopay.engine.inbound_mail import InboundMail
from envelopay.engine.jobs import job_of
from envelopay.engine.recorder import Recorder
from envelopay.engine.refund_check import check_excess, check_refund
from envelopay.engine.status import StatusDesk
from envelopay.engine.step_facts import Work, reply_headers
from envelopay.engine.unusable import refund_excess, refund_unusable
from envelopay.engine.verify import verify_proof
from envelopay.flows import Action, FlowState, Step
from envelopay.ledger.store import ProofKey
from envelopay.protocol.codes import OopsCode
from envelopay.protocol.messages import Message, Oops

__all__ = ["ActionDriver"]

_log = logging.getLogger(__name__)


class ActionDriver:
    def __init__(
        self, recorder: Recorder, status: StatusDesk, bind_proof: Callable[[Message, str], Message]
    ) -> None:
        self.recorder = recorder
        self.settings = recorder.settings
        self.status = status
        self.bind_proof = bind_proof

    async def run(
        self,
        mail: InboundMail,
        message: Message,
        step: Step,
        work: Work,
        proof_key: ProofKey | None,
        now: datetime,
    ) -> None:
        """Do the step's actions; a proof that fails stops here (`work.persist` False)."""
        before = work.fs
        work.fs = FlowState(before.kind, before.side, step.state, step.data)
        if not isinstance(message, Oops):
            # Our later sends in this flow reply to its latest substantive message.
            last_in = {
                "message_id": mail.parsed.message_id,
                "references": list(reply_headers(mail.parsed)[1]),
            }
            work.fs = replace(work.fs, data={**step.data, "last_in": last_in})
        work.start = before
        key = proof_key.key if proof_key is not None else None
        for action in step.actions:
            if action is Action.VERIFY_PROOF:
                if not await self._verify(message, step, work, key, now):
                    return
            elif action is Action.VERIFY_REFUND:
                await check_refund(message, work, self.settings)
            elif action is Action.VERIFY_EXCESS:
                await check_excess(message, work, self.settings)
            elif action is Action.NOTIFY:
                work.notices.append(self._notice(mail, message, work))
            else:
                await self._decide(action, mail, message, work, now)

    async def unusable(
        self, message: Message, work: Work, code: OopsCode | None, key: str | None, now: datetime
    ) -> None:
        """A PAY refused for its amount: its money back, when it reached us (engine/unusable.py)."""
        if code is OopsCode.AMOUNT_MISMATCH:
            work.oops_extra = await refund_unusable(message, work, self.settings, key, now)

    async def _verify(self, message: Message, step: Step, work: Work, key: str | None, now: datetime) -> bool:
        failed = await verify_proof(message, step, work, self.settings, key)
        if failed is not None:
            work.oops, work.detail = failed
            work.persist = False  # the message did not happen, as far as the flow goes
            await self.unusable(message, work, work.oops, key, now)
            return False
        await refund_excess(message, work, self.settings, key)
        return True

    def _notice(self, mail: InboundMail, message: Message, work: Work, job_id: str | None = None) -> Notice:
        fs = work.fs
        return Notice(
            work.flow_id,
            fs.kind,
            fs.side,
            fs.state,
            work.peer,
            message,
            mail.parsed.message_id,
            work.verdict,
            job_id,
        )

    async def _ask(self, call: answers.Call) -> Any:
        """The application's answer; a handler that raises is a refusal, task_failed."""
        try:
            return await call(self.settings.app)
        except Exception as exc:
            _log.exception("application handler raised")
            return Refuse(OopsCode.TASK_FAILED, f"handler raised {type(exc).__name__}")

    async def _decide(
        self, action: Action, mail: InboundMail, message: Message, work: Work, now: datetime
    ) -> None:
        asked = answers.question(action, message, work, answers.context(self.settings, work, now))
        decision = await self._ask(asked) if callable(asked) else asked
        if isinstance(decision, Enqueue):  # no answer now: the job runner's, later
            if decision.refund:  # money paid back already: in the flow, for the job's FULFILL
                work.fs = replace(work.fs, data={**work.fs.data, "refund": dict(decision.refund)})
            work.job = job_of(decision, message, work, mail.parsed.message_id, self.settings.address, now)
            work.notices.append(self._notice(mail, message, work, work.job.job_id))
            self.status.tell_accepted(mail, message, work, now)  # WAIT queued, to a buyer that asked for it
            return
        if isinstance(decision, Message):
            decision = self.bind_proof(decision, work.peer)  # an ACCEPT's counter-payment
        answers.apply(self.recorder, mail, decision, work, now)
