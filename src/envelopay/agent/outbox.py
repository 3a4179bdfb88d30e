"""Deprecated: `envelopay.agent.outbox` moved to `envelopay.engine.outbox`.

    envelopay.engine.outbox              DirectHook, DrainReport, EnforcerHook, OutboxDrainer, SendHook,
                                         SendResult, SendStatus, Signer, dkim_signer

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.engine.outbox import (
    DirectHook,
    DrainReport,
    EnforcerHook,
    OutboxDrainer,
    SendHook,
    SendResult,
    SendStatus,
    Signer,
    dkim_signer,
)

__all__ = [
    "DirectHook",
    "DrainReport",
    "EnforcerHook",
    "OutboxDrainer",
    "SendHook",
    "SendResult",
    "SendStatus",
    "Signer",
    "dkim_signer",
]

warnings.warn(
    "envelopay.agent.outbox is deprecated; import from envelopay.engine.outbox instead",
    DeprecationWarning,
    stacklevel=2,
)
