"""DKIM signing and verification (RFC 6376, RFC 8463). DNS is injected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DkimStatus = Literal["pass", "fail", "temperror", "none"]


@dataclass(frozen=True, slots=True)
class DkimResult:
    """The verdict on one inbound message's DKIM signatures.

    status  -- pass if at least one signature verifies; none if there is no signature
    domain  -- the d= of the passing signature (or of the first signature seen)
    aligned -- the passing signature's domain equals (or is a parent of) the From domain
    """

    status: DkimStatus
    domain: str | None = None
    aligned: bool = False
    detail: str = ""
