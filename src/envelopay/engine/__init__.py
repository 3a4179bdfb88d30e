"""The engine: the inbound path of one message, the outbound send, and the outbox.

`Engine` (inbound.py) is composed, not inherited: it holds its settings and its parts.

    inbound.py       Engine: the thin driver of the inbound path (claim, step, commit) and
                     the faces of its parts (send, send_whatsup, new_id)
    inbound_mail.py  InboundMail: one received message, read once (parse, ids, sender, DKIM)
    decide.py        the path's decisions as pure functions returning plans (admit, claim,
                     join a flow, settle the one commit)
    actions.py       ActionDriver: the flow table's actions (rail.verify, the application)
    answers.py       the application's question an action asks, and what its answer becomes
                     in the flow (a reply the table takes, an OOPS, silence): no I/O
    settings.py      EngineSettings: what every part holds; ids are minted here
    recorder.py      Recorder: answers composed, held back (RFC 3834, limits), committed
    refusals.py      Refusals: every way the path says no (OOPS or silence), in one commit
    not_protocol.py  NotProtocol: a person's reply in our thread, or why mail was not read
    status.py        StatusDesk: the status extension (WAIT, WHATSUP)
    verify.py        the VerifyProof action (binding, rail.verify, the earliest transfer)
    unusable.py      money we cannot use (a PAY refused for its amount, an overpayment)
    refund_check.py  the VerifyRefund action (payer side)
    waiting.py       a proof not final yet, parked in the ledger
    poison.py        input the ledger could never store
    alignment.py     DKIM alignment with the From acted on
    bounces.py       a DSN recorded on its outbox row
    send.py          Sender: record a message we compose in its flow and outbox
    application.py   what the engine asks the application (Application, Context, Refuse, Notice,
                     Enqueue: work taken on as a job)
    jobs.py          the job row a step writes when the application answers Enqueue
    outcome.py       what a step did (Outcome) and what a send recorded (Sent)
    records.py       the working state of a step (Work), its log lines and flow facts
    outbox.py        the drainer: outbox row → send hook → DKIM signature → transport

The engine knows nothing of the worker, the endpoints or how a node is wired: those
rooms sit above it and hand it an Application, a Store, rails and a Transport.
"""

from __future__ import annotations

from envelopay.engine.application import Application, BaseApplication, Context, Enqueue, Notice, Refuse
from envelopay.engine.inbound import Engine
from envelopay.engine.outcome import Outcome, Sent

__all__ = [
    "Application",
    "BaseApplication",
    "Context",
    "Engine",
    "Enqueue",
    "Notice",
    "Outcome",
    "Refuse",
    "Sent",
]
