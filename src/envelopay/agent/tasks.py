"""Deprecated: `envelopay.agent.tasks` moved to `envelopay.worker.tasks`.

    envelopay.worker.tasks               DeclaredTask, MAX_RESULT_BYTES, TaskBook, TaskError, TaskRequest

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.worker.tasks import MAX_RESULT_BYTES, DeclaredTask, TaskBook, TaskError, TaskRequest

__all__ = [
    "MAX_RESULT_BYTES",
    "DeclaredTask",
    "TaskBook",
    "TaskError",
    "TaskRequest",
]

warnings.warn(
    "envelopay.agent.tasks is deprecated; import from envelopay.worker.tasks instead",
    DeprecationWarning,
    stacklevel=2,
)
