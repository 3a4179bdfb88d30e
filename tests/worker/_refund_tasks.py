"""A paid task that always fails, for the refund tests (a worker imports it by name)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Review(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""


def fail(p: Review) -> dict[str, Any]:
    raise RuntimeError("the reviewer broke")
