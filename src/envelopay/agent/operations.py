"""Deprecated: `envelopay.agent.operations` moved to `envelopay.worker.operations`.

    envelopay.endpoints.reference        KV_TABLE, KvGet, kv_get
    envelopay.worker.operations          Digest, WordCount, digest, word_count

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.endpoints.reference import KV_TABLE, KvGet, kv_get
from envelopay.worker.operations import Digest, WordCount, digest, word_count

__all__ = [
    "KV_TABLE",
    "Digest",
    "KvGet",
    "WordCount",
    "digest",
    "kv_get",
    "word_count",
]

warnings.warn(
    "envelopay.agent.operations is deprecated; import from envelopay.worker.operations instead",
    DeprecationWarning,
    stacklevel=2,
)
