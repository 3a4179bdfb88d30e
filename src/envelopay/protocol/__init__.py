"""Sans-IO Envelopay protocol: grammar, message models, parse and compose.

This package never imports I/O layers (mail, ledger, agent) or chain libraries.
The public API is exactly `__all__`; a test pins it.
"""

from __future__ import annotations

from typing import Any

from envelopay.protocol.codes import SPEC_CODES, OopsCode
from envelopay.protocol.compose import (
    HeaderValueError,
    compose,
    compose_message,
    message_json,
    new_message_id,
    reply_headers,
)
from envelopay.protocol.messages import (
    Accept,
    Fulfill,
    Give,
    Invoice,
    Message,
    MessageType,
    Methods,
    Offer,
    Oops,
    OopsError,
    Order,
    Pay,
    RailMethod,
    Want,
    Which,
)
from envelopay.protocol.outbound import Outbound
from envelopay.protocol.parse import ParseOptions, parse
from envelopay.protocol.parsed import Parsed, Problem

__all__ = [
    "SPEC_CODES",
    "Accept",
    "Fulfill",
    "Give",
    "HeaderValueError",
    "Invoice",
    "Message",
    "MessageType",
    "Methods",
    "Offer",
    "Oops",
    "OopsCode",
    "OopsError",
    "Order",
    "Outbound",
    "ParseOptions",
    "Parsed",
    "Pay",
    "Problem",
    "RailMethod",
    "Want",
    "Which",
    "compose",
    "compose_message",
    "make_oops",
    "message_json",
    "new_message_id",
    "parse",
    "reply_headers",
]


def make_oops(code: OopsCode | str, note: str, *, ref: str | None = None, **detail: Any) -> Oops:
    """An OOPS whose `error` object is {"code": code, **detail}; `ref` names the message
    it answers (spec: "OOPS may include a generic ref field")."""
    return Oops(note=note, ref=ref, error=OopsError(code=str(code), **detail))
