"""Solana program ids, chain names and the asset registry (as data).

Chain names: "solana" (mainnet-beta), "solana-devnet" and "solana-local" (the
in-process LiteSVM chain). The local mints have fixed addresses: their keypairs are
derived from fixed seeds, so the registry below can name them.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from envelopay.rails.interface import AssetInfo

SYSTEM_PROGRAM = "11111111111111111111111111111111"
TOKEN_PROGRAM = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
TOKEN_2022_PROGRAM = "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"
ATA_PROGRAM = "ATokenGPvbdGVxr1b2hvZbsiqW5xWH25efTNsLJA8knL"
TOKEN_PROGRAMS = frozenset({TOKEN_PROGRAM, TOKEN_2022_PROGRAM})

Network = Literal["mainnet", "devnet", "local"]
NETWORK_CHAIN: dict[str, str] = {"mainnet": "solana", "devnet": "solana-devnet", "local": "solana-local"}
CHAINS: tuple[str, ...] = tuple(NETWORK_CHAIN.values())

# Seeds of the local chain's mint keypairs (test keys, public on purpose).
LOCAL_USDC_SEED = hashlib.sha256(b"envelopay-local-usdc").digest()
LOCAL_PYUSD_SEED = hashlib.sha256(b"envelopay-local-pyusd").digest()
LOCAL_USDC_MINT = "Hk7utdLADNVkLYHd9aVR3UcRSMRcWbuKyMF3tDyLxSbj"
LOCAL_PYUSD_MINT = "A1Acs9jcNN5RKsv56ARvwps34grQhShUyiVcGDYzdKJa"

ASSETS: tuple[AssetInfo, ...] = (
    AssetInfo("solana", "SOL", None, 9),
    AssetInfo("solana", "USDC", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", 6, TOKEN_PROGRAM),
    AssetInfo("solana", "USDT", "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY11McCe8BenwNYB", 6, TOKEN_PROGRAM),
    AssetInfo("solana", "PYUSD", "2b1kV6DkPAnxd5ixfnxCpjxmKwqjjaYmCZfHsFu24GXo", 6, TOKEN_2022_PROGRAM),
    AssetInfo("solana-devnet", "SOL", None, 9),
    AssetInfo("solana-devnet", "USDC", "4zMMC9srt5Ri5X14GAgXhaHii3GnPAEERYPJgZJDncDU", 6, TOKEN_PROGRAM),
    AssetInfo("solana-local", "SOL", None, 9),
    AssetInfo("solana-local", "USDC", LOCAL_USDC_MINT, 6, TOKEN_PROGRAM),
    AssetInfo("solana-local", "PYUSD", LOCAL_PYUSD_MINT, 6, TOKEN_2022_PROGRAM),
)
