"""Deprecated: `envelopay.agent.serve` moved to `envelopay.node.serve`.

    envelopay.node.serve                 serve_worker

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.node.serve import serve_worker

__all__ = [
    "serve_worker",
]

warnings.warn(
    "envelopay.agent.serve is deprecated; import from envelopay.node.serve instead",
    DeprecationWarning,
    stacklevel=2,
)
