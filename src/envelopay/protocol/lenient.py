"""The `lenient` interop profile: three opt-in readings for implementations that bend
the spec (SPEC.md "Interop profile `lenient`"). Strict is the default; each reading
applied is reported as a warning that starts with `lenient:` (`LENIENT_PREFIX`).

L1  a `Re: ...` subject whose body starts with a valid `TYPE | note` line is that
    type (AgentMail's reply endpoint keeps the original subject; the author's
    implementation writes its real subject as the body's first line);
L2  a FULFILL, ACCEPT or INVOICE without `id` gets one derived from the Message-ID;
L3  a METHODS rail without `price` is "price on request" (`price` None).
"""

from __future__ import annotations

import hashlib
from typing import Any

from envelopay.protocol.grammar import SubjectForm, classify_subject
from envelopay.protocol.messages import MessageType

__all__ = ["DERIVED_ID_TYPES", "LENIENT_PREFIX", "derived_id", "fill", "lenient_warnings", "type_line"]

LENIENT_PREFIX = "lenient:"
DERIVED_ID_TYPES: frozenset[MessageType] = frozenset(
    {MessageType.FULFILL, MessageType.ACCEPT, MessageType.INVOICE}
)
_MAX_TYPE_LINE = 998


def type_line(text: str) -> SubjectForm | None:
    """L1: the body's first non-blank line read with the subject grammar, when it is
    one of the nine types (an unknown keyword there is prose, not a type)."""
    for line in text.splitlines():
        if not line.strip():
            continue
        if len(line) > _MAX_TYPE_LINE:
            return None
        form = classify_subject(line.strip())
        return form if form.protocol and form.type is not None else None
    return None


def derived_id(message_id: str | None) -> str | None:
    """L2: `mid_` and 24 hex digits of SHA-256 over the Message-ID as written: the same
    message always gets the same id; None without a Message-ID."""
    if not message_id:
        return None
    return "mid_" + hashlib.sha256(message_id.encode("utf-8", "replace")).hexdigest()[:24]


def fill(
    kind: MessageType, body: dict[str, Any], message_id: str | None, warnings: list[str]
) -> dict[str, Any]:
    """The body as the validator sees it under the profile (L2); `Parsed.body` keeps
    the raw object. L3 happens in the model (validation context {"lenient": True})."""
    if kind in DERIVED_ID_TYPES and "id" not in body:
        ident = derived_id(message_id)
        if ident is not None:
            warnings.append(
                f"{LENIENT_PREFIX} {kind.keyword} without id; id {ident} derived from the Message-ID"
            )
            return {**body, "id": ident}
    return body


def lenient_warnings(warnings: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The leniencies applied to one message (what a worker counts)."""
    return tuple(w for w in warnings if w.startswith(LENIENT_PREFIX))
