"""Key generation for `envelopay init`: a DKIM key and local-chain wallet keys.

Files (all mode 0600):
  dkim.pem          RSA-2048 private key, PKCS#8 PEM (dkim.txt: the DNS TXT record)
  solana.json       Solana keypair as the solana CLI writes it: a JSON array of 64 bytes
  base.key          EVM private key, 0x-prefixed hex (one line)

The generated keys are for local chains and a local garden; nothing here touches a
network. Randomness is injected (`entropy`) so tests can make reproducible keys.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GeneratedKeys", "evm_address", "generate_keys", "solana_pubkey"]

Entropy = Callable[[int], bytes]


@dataclass(frozen=True, slots=True)
class GeneratedKeys:
    dkim_key: Path
    dkim_txt: Path
    solana_keypair: Path
    solana_wallet: str
    base_key: Path
    base_wallet: str


def _write_private(path: Path, data: bytes) -> None:
    # Create with 0600 from the start: a key never exists world-readable, even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def solana_pubkey(keypair_path: Path) -> str:
    from solders.keypair import Keypair  # lazy: keeps solders off this module's import

    raw = bytes(json.loads(keypair_path.read_text()))
    return str(Keypair.from_bytes(raw).pubkey())


def evm_address(key_path: Path) -> str:
    from eth_account import Account  # lazy: keeps eth_account off this module's import

    return str(Account.from_key(key_path.read_text().strip()).address)


def generate_keys(directory: Path, *, entropy: Entropy = secrets.token_bytes) -> GeneratedKeys:
    """Generate all keys into `directory` (which must not already hold them)."""
    # lazy: keeps cryptography, eth_account, solders off this module's import
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from eth_account import Account
    from solders.keypair import Keypair

    directory.mkdir(parents=True, exist_ok=True)
    # RSA key generation draws from the OS; the wallet keys use the injected entropy.
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = rsa_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = rsa_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    dkim_key = directory / "dkim.pem"
    dkim_txt = directory / "dkim.txt"
    _write_private(dkim_key, pem)
    dkim_txt.write_text(f"v=DKIM1; k=rsa; p={base64.b64encode(pub).decode()}\n")

    kp = Keypair.from_seed(entropy(32))
    sol = directory / "solana.json"
    _write_private(sol, json.dumps(list(bytes(kp))).encode())

    evm_secret = entropy(32)
    acct = Account.from_key(evm_secret)
    base = directory / "base.key"
    _write_private(base, ("0x" + evm_secret.hex() + "\n").encode())
    return GeneratedKeys(dkim_key, dkim_txt, sol, str(kp.pubkey()), base, str(acct.address))
