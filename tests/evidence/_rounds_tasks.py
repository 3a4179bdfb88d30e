"""A paid task that fails until its gate file exists, for the evidence of a retried job (a
worker imports it by name): the first round ends held, the operator opens the gate and
retries, and the second round delivers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class Gated(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = ""
    gate: str = ""


def gated(p: Gated) -> dict[str, Any]:
    if not Path(p.gate).exists():
        raise RuntimeError("the gate is shut")
    return {"words": len(p.text.split())}
