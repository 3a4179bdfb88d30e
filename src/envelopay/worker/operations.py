"""Reference operations a worker can declare in its config (deterministic, data only).

Each is a pydantic request schema plus a pure handler. They exist so the demo, the
tests and `envelopay init` have something real to sell; operators declare their own
in the same shape.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

__all__ = ["Digest", "KvGet", "WordCount", "digest", "kv_get", "word_count"]


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class WordCount(_Params):
    text: Annotated[str, StringConstraints(max_length=100_000)]


def word_count(req: WordCount) -> dict[str, int]:
    return {"words": len(req.text.split()), "characters": len(req.text)}


class Digest(_Params):
    text: Annotated[str, StringConstraints(max_length=100_000)]


def digest(req: Digest) -> dict[str, str]:
    return {"sha256": hashlib.sha256(req.text.encode()).hexdigest()}


class KvGet(_Params):
    key: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[a-z0-9_.-]+$")]


# A fixed table: the reference responder is a deterministic key-value read.
KV_TABLE: dict[str, str] = {
    "spec.version": "0.1.0",
    "spec.types": "WHICH METHODS PAY ORDER FULFILL INVOICE OFFER ACCEPT OOPS",
    "garden.domain": "garden.local",
    "usdc.decimals": "6",
}


def kv_get(req: KvGet) -> dict[str, str]:
    from envelopay.agent.responders import ResponderError

    try:
        return {"key": req.key, "value": KV_TABLE[req.key]}
    except KeyError:
        raise ResponderError("not_found", f"no key {req.key!r}", "key") from None
