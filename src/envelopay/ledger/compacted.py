"""The smallest forms retention leaves (SPEC.md "Retention"), as pure functions.

The same two exist as SQL functions on PostgreSQL (schema v10: ep_digest, ep_small);
SQLite registers these on its connection under the same names, so compaction's
statements are one text for both backends."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

__all__ = ["DIGEST_BYTES", "digest", "same_content", "small", "small_json"]

_HEX64 = re.compile(r"[0-9a-f]{64}")


DIGEST_BYTES = 16


def digest(content_hash: str) -> bytes:
    """A content hash in 16 bytes: the first half of the engine's hex SHA-256, decoded;
    any other text (another implementation's hash) hashed first. 128 bits keep distinct
    contents distinct; and a collision could only make a reused id with other content
    answer as a retransmission (the recorded outcome again): nothing is done twice."""
    if not _HEX64.fullmatch(content_hash):
        content_hash = hashlib.sha256(content_hash.encode()).hexdigest()
    return bytes.fromhex(content_hash[: DIGEST_BYTES * 2])


def same_content(stored_hash: str, stored_digest: bytes | None, claimed: str) -> bool:
    """Does a (sender, id) pair's recorded content equal a claim's? (a compacted pair
    holds only the digest)."""
    if stored_digest is not None:
        return bytes(stored_digest) == digest(claimed)
    return stored_hash == claimed


def small(outcome: Any) -> dict[str, Any]:
    """An outcome's smallest form: its status (what every reader of an outcome needs)
    and its flow."""
    doc = outcome if isinstance(outcome, dict) else {}
    status = doc.get("status")
    out: dict[str, Any] = {"status": status if isinstance(status, str) and status else "compacted"}
    if isinstance(doc.get("flow_id"), str):
        out["flow_id"] = doc["flow_id"]
    return out


def small_json(text: str | None) -> str:
    """`small` over JSON text (SQLite's stored form)."""
    doc = small(None if text is None else json.loads(text))
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
