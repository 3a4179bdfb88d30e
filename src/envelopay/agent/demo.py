"""Deprecated: `envelopay.agent.demo` moved to `envelopay.client.demo`.

    envelopay.client.demo                BUYER, BuyerApp, DOMAIN, DemoResult, DemoWorld, MALLORY, PRICE,
                                         Row, STEP_TIMEOUT, WORKER, run_demo

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.client.demo import (
    BUYER,
    DOMAIN,
    MALLORY,
    PRICE,
    STEP_TIMEOUT,
    WORKER,
    BuyerApp,
    DemoResult,
    DemoWorld,
    Row,
    run_demo,
)

__all__ = [
    "BUYER",
    "DOMAIN",
    "MALLORY",
    "PRICE",
    "STEP_TIMEOUT",
    "WORKER",
    "BuyerApp",
    "DemoResult",
    "DemoWorld",
    "Row",
    "run_demo",
]

warnings.warn(
    "envelopay.agent.demo is deprecated; import from envelopay.client.demo instead",
    DeprecationWarning,
    stacklevel=2,
)
