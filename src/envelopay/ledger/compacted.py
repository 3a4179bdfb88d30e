"""The smallest forms retention leaves (SPEC.md "Retention"), as pure functions.

The same two exist as SQL functions on PostgreSQL (schema v10: ep_digest, ep_small);
SQLite registers these on its connection under the same names, so compaction's
statements are one text for both backends."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

__all__ = ["digest", "same_content", "small", "small_json"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


def digest(content_hash: str) -> bytes:
    """A content hash in 32 bytes: the engine's hex SHA-256 decoded; any other text
    (another implementation's hash) hashed, so equal inputs stay equal and only equal."""
    if _HEX64.fullmatch(content_hash):
        return bytes.fromhex(content_hash)
    return hashlib.sha256(content_hash.encode()).digest()


def same_content(stored_hash: str, stored_digest: bytes | None, claimed: str) -> bool:
    """Does a (sender, id) pair's recorded content equal a claim's? (a compacted pair
    holds only the digest)."""
    if stored_digest is not None:
        return bytes(stored_digest) == digest(claimed)
    return stored_hash == claimed


def small(outcome: Any) -> dict[str, Any]:
    """An outcome's smallest form: its status and flow, marked compacted (`status` is
    what every reader of an outcome needs)."""
    doc = outcome if isinstance(outcome, dict) else {}
    status = doc.get("status")
    out: dict[str, Any] = {"compacted": True, "status": status if isinstance(status, str) and status else ""}
    out["status"] = out["status"] or "compacted"
    if isinstance(doc.get("flow_id"), str):
        out["flow_id"] = doc["flow_id"]
    return out


def small_json(text: str | None) -> str:
    """`small` over JSON text (SQLite's stored form)."""
    doc = small(None if text is None else json.loads(text))
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
