"""Reference operations a worker can declare in its config (deterministic, data only).

Each is a pydantic request schema plus a pure handler. They exist so the demo, the
tests and `envelopay init` have something real to sell; operators declare their own
in the same shape. The reference responder's key-value read lives with the responders
(envelopay.endpoints.reference).
"""

from __future__ import annotations

import hashlib
from typing import Annotated

from pydantic import BaseModel, ConfigDict, StringConstraints

__all__ = ["Digest", "WordCount", "digest", "word_count"]


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
