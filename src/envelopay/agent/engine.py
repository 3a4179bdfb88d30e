"""Deprecated: `envelopay.agent.engine` moved to `envelopay.engine`.

    envelopay.engine.application         Application, BaseApplication, Context, Decision, Notice, Refuse
    envelopay.engine.inbound             DkimPolicy, Engine
    envelopay.engine.outcome             Outcome, OutcomeStatus, Repeat, Sent
    envelopay.engine.records             INVOICE_ISSUED_AT, INVOICE_SKEW, content_hash

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.engine.application import Application, BaseApplication, Context, Decision, Notice, Refuse
from envelopay.engine.inbound import DkimPolicy, Engine
from envelopay.engine.outcome import Outcome, OutcomeStatus, Repeat, Sent
from envelopay.engine.records import INVOICE_ISSUED_AT, INVOICE_SKEW, content_hash

__all__ = [
    "INVOICE_ISSUED_AT",
    "INVOICE_SKEW",
    "Application",
    "BaseApplication",
    "Context",
    "Decision",
    "DkimPolicy",
    "Engine",
    "Notice",
    "Outcome",
    "OutcomeStatus",
    "Refuse",
    "Repeat",
    "Sent",
    "content_hash",
]

warnings.warn(
    "envelopay.agent.engine is deprecated; import from envelopay.engine instead",
    DeprecationWarning,
    stacklevel=2,
)
