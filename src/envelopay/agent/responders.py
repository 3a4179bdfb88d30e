"""Deprecated: `envelopay.agent.responders` moved to `envelopay.endpoints.responders`.

    envelopay.endpoints.reference        reference_responder
    envelopay.endpoints.responders       Responder, ResponderError

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.endpoints.reference import reference_responder
from envelopay.endpoints.responders import Responder, ResponderError

__all__ = [
    "Responder",
    "ResponderError",
    "reference_responder",
]

warnings.warn(
    "envelopay.agent.responders is deprecated; import from envelopay.endpoints.responders instead",
    DeprecationWarning,
    stacklevel=2,
)
