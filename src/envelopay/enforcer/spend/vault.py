"""Custody: the leashed agents' wallet keys, sealed at rest, never handed out.

Keys are sealed with AES-256-GCM under a key derived (HKDF-SHA256) from an operator
secret: a string (ENVELOPAY_ENFORCER_VAULT_SECRET) or a file (--vault-key-file). The
associated data binds each sealed blob to its agent and wallet id, so a blob copied onto
another row does not open. Plaintext keys live only inside `Vault.open_secret` callers for
the duration of one signing; no value in this module renders key material in a repr, an
error or a log line.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from envelopay.errors import ConfigError

__all__ = ["SEALED_VERSION", "Vault", "VaultError", "WalletRecord", "load_vault"]

SEALED_VERSION = b"ev1"
_INFO = b"envelopay enforcer wallet vault v1"
_MIN_SECRET = 16  # bytes: an operator secret shorter than this is refused


class VaultError(Exception):
    """A sealed key that does not open (wrong vault key, or a blob moved between rows).
    The message names the wallet, never the key."""


@dataclass(frozen=True, slots=True)
class WalletRecord:
    """A wallet as the enforcer shows it: no key material, ever."""

    id: str
    agent_id: str
    chain: str
    address: str
    label: str
    created_at: float

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "chain": self.chain, "address": self.address, "label": self.label}


class Vault:
    """Seals and opens wallet keys. Construct with `load_vault`."""

    __slots__ = ("_aead",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) < _MIN_SECRET:
            raise ConfigError(f"the vault secret must be at least {_MIN_SECRET} bytes")
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(secret)
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "Vault(<sealed>)"

    @staticmethod
    def _aad(agent_id: str, wallet_id: str) -> bytes:
        return f"{agent_id}\x00{wallet_id}".encode()

    def seal(self, secret: bytes, *, agent_id: str, wallet_id: str) -> bytes:
        nonce = os.urandom(12)
        return SEALED_VERSION + nonce + self._aead.encrypt(nonce, secret, self._aad(agent_id, wallet_id))

    def open_secret(self, sealed: bytes, *, agent_id: str, wallet_id: str) -> bytes:
        if not sealed.startswith(SEALED_VERSION) or len(sealed) < len(SEALED_VERSION) + 12 + 16:
            raise VaultError(f"wallet {wallet_id}: not a sealed key")
        body = sealed[len(SEALED_VERSION) :]
        try:
            return self._aead.decrypt(body[:12], body[12:], self._aad(agent_id, wallet_id))
        except InvalidTag:
            raise VaultError(
                f"wallet {wallet_id}: the sealed key does not open with this vault key"
            ) from None


def load_vault(*, secret: str | None = None, key_file: str | Path | None = None) -> Vault:
    """The vault from an operator secret or a key file (whole file contents, stripped of a
    trailing newline). Exactly one must be given."""
    if (secret is None) == (key_file is None):
        raise ConfigError("the vault needs exactly one of an operator secret or a key file")
    if key_file is not None:
        try:
            raw = Path(key_file).read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read the vault key file {key_file}: {type(exc).__name__}") from exc
        return Vault(raw)
    assert secret is not None
    return Vault(secret.encode())


def new_vault_secret() -> str:
    """A fresh operator secret (for `envelopay enforcer vault-key`)."""
    return secrets.token_urlsafe(32)
