"""Deprecated: `envelopay.agent.node` moved to `envelopay.node.wiring`.

    envelopay.node.wiring                AgentNode, Clock, GardenPool, RECENT, build_node,
                                         counterpay_path, dns_for, enforcer_hook, garden_transport,
                                         imap_config, open_store, smtp_transport

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.node.wiring import (
    RECENT,
    AgentNode,
    Clock,
    GardenPool,
    build_node,
    counterpay_path,
    dns_for,
    enforcer_hook,
    garden_transport,
    imap_config,
    open_store,
    smtp_transport,
)

__all__ = [
    "RECENT",
    "AgentNode",
    "Clock",
    "GardenPool",
    "build_node",
    "counterpay_path",
    "dns_for",
    "enforcer_hook",
    "garden_transport",
    "imap_config",
    "open_store",
    "smtp_transport",
]

warnings.warn(
    "envelopay.agent.node is deprecated; import from envelopay.node.wiring instead",
    DeprecationWarning,
    stacklevel=2,
)
