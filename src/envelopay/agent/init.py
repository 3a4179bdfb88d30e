"""Deprecated: `envelopay.agent.init` moved to `envelopay.node.init`.

    envelopay.node.init                  InitResult, init_agent, render_config

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.node.init import InitResult, init_agent, render_config

__all__ = [
    "InitResult",
    "init_agent",
    "render_config",
]

warnings.warn(
    "envelopay.agent.init is deprecated; import from envelopay.node.init instead",
    DeprecationWarning,
    stacklevel=2,
)
