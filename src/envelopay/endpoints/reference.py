"""The reference responder: ``kv@DOMAIN``, a deterministic read of a fixed table.

It exists so the demo, the tests and `envelopay init` have a real tool to call;
operators declare their own responders in the same shape (a schema and a handler).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

from envelopay.endpoints.responders import Responder, ResponderError

__all__ = ["KV_TABLE", "KvGet", "kv_get", "reference_responder"]


class KvGet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    key: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[a-z0-9_.-]+$")]


# A fixed table: the reference responder is a deterministic key-value read.
KV_TABLE: dict[str, str] = {
    "spec.version": "0.1.0",
    "spec.types": "WHICH METHODS PAY ORDER FULFILL INVOICE OFFER ACCEPT OOPS",
    "garden.domain": "garden.local",
    "usdc.decimals": "6",
}


def kv_get(req: KvGet) -> dict[str, str]:
    try:
        return {"key": req.key, "value": KV_TABLE[req.key]}
    except KeyError:
        raise ResponderError("not_found", f"no key {req.key!r}", "key") from None


def reference_responder(domain: str = "garden.local") -> Responder:
    """kv@DOMAIN: a deterministic read of KV_TABLE."""
    return Responder(f"kv@{domain}", KvGet, kv_get, "key-value lookup")
