"""The engine: the inbound path of one message, the outbound send, and the outbox.

    inbound.py      Engine.handle: parse → DKIM policy → claim → flows.step → actions → commit
    refusals.py     every way that path says no (OOPS or silence), in one commit
    verify.py       the VerifyProof action (rail.verify, the earliest transfer allowed)
    send.py         Engine.send: record a message we compose in its flow and outbox
    application.py  what the engine asks the application (Application, Context, Refuse, Notice,
                    Enqueue: work taken on as a job)
    jobs.py         the job row a step writes when the application answers Enqueue
    outcome.py      what a step did (Outcome) and what a send recorded (Sent)
    records.py      the working state of a step, its log lines and flow facts
    outbox.py       the drainer: outbox row → send hook → DKIM signature → transport
    transport.py    the Transport seam the drainer sends through

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
