"""Deprecated: `envelopay.agent.config` moved to `envelopay.config`.

    envelopay.config                     AcceptedRail, AgentSection, ExchangePair, ResponderConfig,
                                         TaskConfig, TransportConfig, WorkerConfig, config_from_dict,
                                         load_config, resolve_ref

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.config import (
    AcceptedRail,
    AgentSection,
    ExchangePair,
    ResponderConfig,
    TaskConfig,
    TransportConfig,
    WorkerConfig,
    config_from_dict,
    load_config,
    resolve_ref,
)

__all__ = [
    "AcceptedRail",
    "AgentSection",
    "ExchangePair",
    "ResponderConfig",
    "TaskConfig",
    "TransportConfig",
    "WorkerConfig",
    "config_from_dict",
    "load_config",
    "resolve_ref",
]

warnings.warn(
    "envelopay.agent.config is deprecated; import from envelopay.config instead",
    DeprecationWarning,
    stacklevel=2,
)
