"""Deprecated: `envelopay.agent.worker` moved to `envelopay.worker.app`.

    envelopay.worker.app                 FreeResult, RAIL_KEY, Refusal, WorkerApp, WorkerApplication

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.worker.app import RAIL_KEY, FreeResult, Refusal, WorkerApp, WorkerApplication

__all__ = [
    "RAIL_KEY",
    "FreeResult",
    "Refusal",
    "WorkerApp",
    "WorkerApplication",
]

warnings.warn(
    "envelopay.agent.worker is deprecated; import from envelopay.worker.app instead",
    DeprecationWarning,
    stacklevel=2,
)
