"""Deprecated: `envelopay.agent.runtime` moved to `envelopay.node.runtime`.

    envelopay.node.runtime               Consumer, log, pump, serve_call_replies, serve_responders

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.node.runtime import Consumer, log, pump, serve_call_replies, serve_responders

__all__ = [
    "Consumer",
    "log",
    "pump",
    "serve_call_replies",
    "serve_responders",
]

warnings.warn(
    "envelopay.agent.runtime is deprecated; import from envelopay.node.runtime instead",
    DeprecationWarning,
    stacklevel=2,
)
