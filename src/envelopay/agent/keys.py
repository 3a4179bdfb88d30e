"""Deprecated: `envelopay.agent.keys` moved to `envelopay.node.keys`.

    envelopay.node.keys                  Entropy, GeneratedKeys, evm_address, generate_keys, solana_pubkey

This module re-exports those names for one release and warns on import;
import them from their new homes.
"""

from __future__ import annotations

import warnings

from envelopay.node.keys import Entropy, GeneratedKeys, evm_address, generate_keys, solana_pubkey

__all__ = [
    "Entropy",
    "GeneratedKeys",
    "evm_address",
    "generate_keys",
    "solana_pubkey",
]

warnings.warn(
    "envelopay.agent.keys is deprecated; import from envelopay.node.keys instead",
    DeprecationWarning,
    stacklevel=2,
)
