"""A request refused outright, as the activity page keeps it: the refusal either side
returns (`Refused`) and what a send request asked, in a line (`send_summary`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["Refused", "send_summary"]


class Refused(Protocol):
    """A refusal of either side (Disposition, PaymentDisposition): its code and reason."""

    @property
    def code(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


def send_summary(raw: Mapping[str, Any]) -> str:
    """What a send request asked, in a line for the activity page: recipient, subject or
    message type (read loosely: the request may be the malformed one being refused)."""
    to, what = raw.get("to"), raw.get("subject") or str(raw.get("type") or "").upper()
    to_text = ", ".join(str(x) for x in to) if isinstance(to, list) else str(to or "")
    return " — ".join(x for x in (f"to {to_text}" if to_text else "", str(what or "")) if x)
