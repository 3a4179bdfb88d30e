"""Deprecated: `envelopay.agent.live_conformance` moved to `envelopay.client.live_conformance`.

    envelopay.client.live_conformance    MALFORMED, Sender, Verdict, judge, prepare, replyable, reuse_id,
                                         run_live, run_live_async

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.client.live_conformance import (
    MALFORMED,
    Sender,
    Verdict,
    judge,
    prepare,
    replyable,
    reuse_id,
    run_live,
    run_live_async,
)

__all__ = [
    "MALFORMED",
    "Sender",
    "Verdict",
    "judge",
    "prepare",
    "replyable",
    "reuse_id",
    "run_live",
    "run_live_async",
]

warnings.warn(
    "envelopay.agent.live_conformance is deprecated; import from envelopay.client.live_conformance instead",
    DeprecationWarning,
    stacklevel=2,
)
