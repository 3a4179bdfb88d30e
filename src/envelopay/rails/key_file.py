"""A rail key file read into the bytes a payer takes: the one reader the worker's refunds
(worker/refunds.py) and the spend enforcer's wallet import (enforcer/service) share.

Two shapes: a Solana CLI keypair (a JSON array of bytes) or a hex key (Base, `0x` or
not). Errors are `ConfigError`s that name the file, never its contents.
"""

from __future__ import annotations

import json
from pathlib import Path

from envelopay.errors import ConfigError

__all__ = ["read_key_file"]


def read_key_file(path: str | Path) -> bytes:
    """The key's bytes; a file that is neither shape is a ConfigError naming `path`."""
    try:
        text = Path(path).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read key file {path}: {type(exc).__name__}") from None
    if text.startswith("["):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, list) and all(isinstance(b, int) and 0 <= b < 256 for b in data):
            return bytes(data)
        raise ConfigError(f"{path}: not a JSON array of bytes")
    try:
        return bytes.fromhex(text.removeprefix("0x").removeprefix("0X"))
    except ValueError:
        raise ConfigError(f"{path}: neither a JSON byte array nor hex") from None
