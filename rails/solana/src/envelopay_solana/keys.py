"""Keypair loading: the Solana CLI's keypair file (a JSON array of 64 integers)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from solders.keypair import Keypair

from envelopay.errors import ConfigError


def load_keypair(source: Any) -> Keypair:
    """A Keypair from a path to a Solana CLI keypair file, 64 secret-key bytes, a 32-byte
    seed, or a Keypair. Anything else is a ConfigError (the message never echoes key bytes)."""
    if isinstance(source, Keypair):
        return source
    if isinstance(source, bytes | bytearray):
        raw = bytes(source)
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read Solana keypair file {path}: {type(exc).__name__}") from exc
        if not (isinstance(data, list) and all(isinstance(b, int) and 0 <= b < 256 for b in data)):
            raise ConfigError(f"{path}: a Solana keypair file is a JSON array of byte values")
        raw = bytes(data)
    else:
        raise ConfigError(f"keypair must be a path or bytes, not {type(source).__name__}")
    if len(raw) == 64:
        try:
            return Keypair.from_bytes(raw)
        except ValueError as exc:
            raise ConfigError("keypair bytes are not a valid ed25519 secret key") from exc
    if len(raw) == 32:
        return Keypair.from_seed(raw)
    raise ConfigError(f"a Solana keypair is 64 bytes (or a 32-byte seed), got {len(raw)}")


def write_keypair(keypair: Keypair, path: str | os.PathLike[str]) -> Path:
    """Write a keypair file readable only by its owner (Solana CLI format)."""
    target = Path(path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(list(bytes(keypair)), fh)
    return target
