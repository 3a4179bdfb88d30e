"""Deprecated: `envelopay.agent.calls` moved to `envelopay.endpoints.calls`.

    envelopay.endpoints.calls            CallBook, CallClient, CallRecord, CallResult, CallStatus,
                                         CallStore, Clock, LedgerCalls, Sender

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.endpoints.calls import (
    CallBook,
    CallClient,
    CallRecord,
    CallResult,
    CallStatus,
    CallStore,
    Clock,
    LedgerCalls,
    Sender,
)

__all__ = [
    "CallBook",
    "CallClient",
    "CallRecord",
    "CallResult",
    "CallStatus",
    "CallStore",
    "Clock",
    "LedgerCalls",
    "Sender",
]

warnings.warn(
    "envelopay.agent.calls is deprecated; import from envelopay.endpoints.calls instead",
    DeprecationWarning,
    stacklevel=2,
)
