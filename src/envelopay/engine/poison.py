"""Input the ledger could never store, found before any reservation (issue 11, item 6).

A message can parse and still be poison: a lone surrogate (``"\\udcff"`` is valid JSON
but no valid Unicode) in its id, its Message-ID, its threading headers or its task; a
task nested so deep that serializing it fails. Such a message must be answered with
its OOPS code, or at worst quarantined with a reason, never left half-claimed (a
retransmission of its id would then stay `busy` forever). Pure functions.
"""

from __future__ import annotations

import json
from dataclasses import replace

from envelopay.protocol.compose import is_bare_address  # what compose will put in To:
from envelopay.protocol.messages import Message
from envelopay.protocol.parsed import Parsed

__all__ = ["clean_parsed", "storable", "unstorable_body"]


def storable(text: str | None) -> bool:
    """Can this text go into the ledger (both backends want valid UTF-8)?"""
    if text is None:
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text  # PostgreSQL text and jsonb refuse NUL


def clean_parsed(parsed: Parsed, fallback_message_id: str | None) -> Parsed:
    """`parsed` with the header values the ledger keys on made storable: an unstorable
    Message-ID becomes the raw bytes' fallback id, unstorable thread ids are dropped,
    a sender that is unstorable or no bare address compose accepts is no sender (such
    mail cannot be answered, so it is not protocol mail to us)."""
    changes: dict[str, object] = {}
    if not storable(parsed.message_id):
        changes["message_id"] = fallback_message_id
    if not storable(parsed.in_reply_to):
        changes["in_reply_to"] = None
    if not all(storable(r) for r in parsed.references):
        changes["references"] = tuple(r for r in parsed.references if storable(r))
    sender = parsed.from_addr
    if sender is not None and not (storable(sender) and is_bare_address(sender)):
        changes["from_addr"] = None  # a reply could never be composed to it
    return replace(parsed, **changes) if changes else parsed  # type: ignore[arg-type]


def unstorable_body(message: Message, protocol_id: str | None) -> str | None:
    """Why this message cannot be recorded as it is, or None when it can."""
    if not storable(protocol_id):
        return "id: not valid Unicode (a lone surrogate or NUL)"
    try:
        dumped = message.model_dump(mode="json")
        json.dumps(dumped)
    except (ValueError, RecursionError) as exc:  # pydantic: "Maximum serialization depth exceeded"
        return f"the body cannot be serialized ({str(exc)[:80]}); nest JSON less deeply"
    if not _all_storable(dumped):
        return "the body holds text that is not valid Unicode (a lone surrogate or NUL)"
    return None


def _all_storable(value: object) -> bool:
    # Iterative: the depth is bounded by what serialized above, but no recursion anyway.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not storable(item):
                return False
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return True
