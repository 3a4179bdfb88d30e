"""Deprecated: `envelopay.agent.transport` moved to `envelopay.engine.transport`.

    envelopay.engine.transport           DeliveryRefused, Transport
    envelopay.node.transports            GardenTransport, SmtpTransport

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.engine.transport import DeliveryRefused, Transport
from envelopay.node.transports import GardenTransport, SmtpTransport

__all__ = [
    "DeliveryRefused",
    "GardenTransport",
    "SmtpTransport",
    "Transport",
]

warnings.warn(
    "envelopay.agent.transport is deprecated; import from envelopay.engine.transport instead",
    DeprecationWarning,
    stacklevel=2,
)
