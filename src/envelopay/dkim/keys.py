"""DKIM private keys: RSA (>= 1024 bits; 2048 generated) or Ed25519 (RFC 8463)."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Literal

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa

from envelopay.errors import ConfigError, UsageError

Algorithm = Literal["rsa-sha256", "ed25519-sha256"]


@dataclass(frozen=True, slots=True)
class DkimKey:
    """A private signing key: RSA (>= 1024 bits; 2048 generated) or Ed25519."""

    algorithm: Algorithm
    private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

    @classmethod
    def generate_rsa(cls, bits: int = 2048) -> DkimKey:
        if bits < 2048:
            raise UsageError("RSA DKIM keys are generated with at least 2048 bits")
        return cls("rsa-sha256", rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @classmethod
    def generate_ed25519(cls) -> DkimKey:
        return cls("ed25519-sha256", ed25519.Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes | str, password: bytes | None = None) -> DkimKey:
        """Load an RSA or Ed25519 private key from PEM (PKCS#1 or PKCS#8)."""
        raw = data.encode("ascii") if isinstance(data, str) else data
        try:
            key = serialization.load_pem_private_key(raw, password=password)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"DKIM key: not a PEM private key ({exc})") from exc
        if isinstance(key, rsa.RSAPrivateKey):
            if key.key_size < 1024:
                raise ConfigError("DKIM key: RSA key shorter than 1024 bits")
            return cls("rsa-sha256", key)
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return cls("ed25519-sha256", key)
        raise ConfigError(f"DKIM key: unsupported key type {type(key).__name__}")

    @classmethod
    def from_ed25519_seed(cls, seed_b64: bytes | str) -> DkimKey:
        """Load an Ed25519 key from its base64 32-byte seed (dkimpy's key format)."""
        try:
            seed = base64.b64decode(seed_b64, validate=True)
        except ValueError as exc:
            raise ConfigError("DKIM key: Ed25519 seed is not base64") from exc
        if len(seed) != 32:
            raise ConfigError("DKIM key: Ed25519 seed must be 32 bytes")
        return cls("ed25519-sha256", ed25519.Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def load(cls, data: bytes | str) -> DkimKey:
        """PEM if it looks like PEM, else a base64 Ed25519 seed."""
        text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
        if "-----BEGIN" in text:
            return cls.from_pem(text)
        return cls.from_ed25519_seed(text.strip())

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def ed25519_seed_b64(self) -> str:
        if not isinstance(self.private, ed25519.Ed25519PrivateKey):
            raise UsageError("not an Ed25519 key")
        raw = self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return base64.b64encode(raw).decode("ascii")

    def public_b64(self) -> str:
        """The p= value: DER SubjectPublicKeyInfo for RSA, the raw 32 bytes for Ed25519."""
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            pub = self.private.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
        else:
            pub = self.private.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        return base64.b64encode(pub).decode("ascii")

    def dns_txt_record(self) -> str:
        """The TXT record to publish at <selector>._domainkey.<domain>."""
        k = "ed25519" if self.algorithm == "ed25519-sha256" else "rsa"
        return f"v=DKIM1; k={k}; p={self.public_b64()}"

    def _sign_digest_input(self, header_data: bytes) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            # RFC 8463: Ed25519 signs the SHA-256 hash of the canonicalized data.
            return self.private.sign(hashlib.sha256(header_data).digest())
        return self.private.sign(header_data, padding.PKCS1v15(), hashes.SHA256())
