"""The Base rail's networks and asset registry, as data (pure: no I/O).

(chain, token) → contract address and decimals; `token` may be a symbol (any case) or
a contract address (any case). Chain names: "base" (mainnet, chain id 8453),
"base-sepolia" (84532) and "base-local" (the in-process eth-tester chain).
"""

from __future__ import annotations

import re
from typing import Literal

from envelopay.rails.interface import AssetInfo

Network = Literal["mainnet", "sepolia", "local"]
NETWORK_CHAIN: dict[str, str] = {"mainnet": "base", "sepolia": "base-sepolia", "local": "base-local"}
CHAINS: tuple[str, ...] = tuple(NETWORK_CHAIN.values())
# EIP-155 chain ids; the local chain's id is read from the chain when it starts.
CHAIN_IDS: dict[str, int] = {"base": 8453, "base-sepolia": 84532}

NATIVE_SYMBOL = "ETH"
NATIVE_DECIMALS = 18

# Circle's USDC deployments (6 decimals).
USDC_BASE = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
USDC_BASE_SEPOLIA = "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
# The local token is the first contract the faucet account deploys on a fresh eth-tester
# chain, so its address is fixed (CREATE address of the faucet with nonce 0). The local
# chain checks this at start and the rail always uses the address it actually deployed.
USDC_LOCAL = "0xF2E246BB76DF876Cef8b38ae84130F4F55De395b"

ASSETS: tuple[AssetInfo, ...] = (
    AssetInfo(chain="base", symbol=NATIVE_SYMBOL, address=None, decimals=NATIVE_DECIMALS),
    AssetInfo(chain="base", symbol="USDC", address=USDC_BASE, decimals=6),
    AssetInfo(chain="base-sepolia", symbol=NATIVE_SYMBOL, address=None, decimals=NATIVE_DECIMALS),
    AssetInfo(chain="base-sepolia", symbol="USDC", address=USDC_BASE_SEPOLIA, decimals=6),
    AssetInfo(chain="base-local", symbol=NATIVE_SYMBOL, address=None, decimals=NATIVE_DECIMALS),
    AssetInfo(chain="base-local", symbol="USDC", address=USDC_LOCAL, decimals=6),
)

_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")


def is_address(value: str) -> bool:
    return isinstance(value, str) and bool(_ADDRESS.match(value))


def norm_address(value: str) -> str:
    """Lowercase 0x address (the comparison form); ValueError when not 20 bytes of hex."""
    if not is_address(value):
        raise ValueError(f"not an EVM address: {str(value)[:60]!r}")
    return value.lower()
