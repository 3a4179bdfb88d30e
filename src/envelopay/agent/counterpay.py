"""Deprecated: `envelopay.agent.counterpay` moved to `envelopay.worker.counterpay`.

    envelopay.worker.counterpay          Begin, CounterPayments

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.worker.counterpay import Begin, CounterPayments

__all__ = [
    "Begin",
    "CounterPayments",
]

warnings.warn(
    "envelopay.agent.counterpay is deprecated; import from envelopay.worker.counterpay instead",
    DeprecationWarning,
    stacklevel=2,
)
