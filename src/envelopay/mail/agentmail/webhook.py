"""AgentMail webhook deliveries: signature check and event reading. Pure (no I/O).

AgentMail delivers webhooks through Svix (https://docs.agentmail.to/webhook-verification):

- headers `svix-id` (the delivery's id, the same on every retry), `svix-timestamp`
  (Unix seconds), `svix-signature` (a space-separated list of `v1,<base64>`);
- the signed content is ``f"{svix_id}.{svix_timestamp}.{body}"`` over the exact body
  bytes; the signature is HMAC-SHA256 keyed with the base64 part of the endpoint's
  `whsec_…` secret (Svix, "Verifying payloads manually").

`verify_delivery` refuses a delivery without the three headers, with a timestamp
outside `tolerance` seconds of now (a replay of a captured delivery, or a clock far
off), or without one matching signature; comparisons are constant-time. Within the
window, a delivery seen before is recognised by its event id, persisted by the caller
(`envelopay.mail.agentmail.inbox`), so a replay inside the window is answered as a
duplicate and handled no further.

`read_event` takes the verified body (EventType / MessageReceivedEvent shapes,
https://docs.agentmail.to/api-reference/webhooks/events/message-received).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from envelopay.protocol import outside_json

__all__ = ["DEFAULT_TOLERANCE", "Event", "Verdict", "read_event", "sign_delivery", "verify_delivery"]

DEFAULT_TOLERANCE = 300  # seconds; Svix's own libraries use five minutes

Refusal = Literal["missing_headers", "bad_secret", "bad_timestamp", "stale", "bad_signature"]


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    reason: Refusal | None = None
    delivery_id: str | None = None

    @property
    def detail(self) -> str:
        return "signature verified" if self.ok else f"refused: {self.reason}"


@dataclass(frozen=True, slots=True)
class Event:
    event_type: str
    event_id: str
    inbox_id: str | None = None
    message_id: str | None = None
    thread_id: str | None = None
    labels: tuple[str, ...] = ()


def _key(secret: str) -> bytes | None:
    if not secret.startswith("whsec_"):
        return None
    try:
        return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except (binascii.Error, ValueError):
        return None


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def _mac(key: bytes, delivery_id: str, timestamp: str, body: bytes) -> bytes:
    # surrogateescape: the exact bytes of a header aiohttp could not decode as UTF-8
    head = f"{delivery_id}.{timestamp}.".encode("utf-8", "surrogateescape")
    return hmac.new(key, head + body, hashlib.sha256).digest()


def sign_delivery(secret: str, delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three headers a delivery of `body` carries (what AgentMail/Svix send; used by
    the test bridge and the tests)."""
    key = _key(secret)
    if key is None:
        raise ValueError("a webhook secret starts with whsec_ and is base64")
    sig = base64.b64encode(_mac(key, delivery_id, str(timestamp), body)).decode("ascii")
    return {"svix-id": delivery_id, "svix-timestamp": str(timestamp), "svix-signature": f"v1,{sig}"}


def verify_delivery(
    secret: str, headers: Mapping[str, str], body: bytes, *, now: float, tolerance: int = DEFAULT_TOLERANCE
) -> Verdict:
    delivery_id = _header(headers, "svix-id")
    timestamp = _header(headers, "svix-timestamp")
    signatures = _header(headers, "svix-signature")
    if not delivery_id or not timestamp or not signatures:
        return Verdict(False, "missing_headers")
    key = _key(secret)
    if key is None:
        return Verdict(False, "bad_secret", delivery_id)
    # isascii: str.isdigit() is true of '²' and '٣', which int() refuses or reads as digits
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > 12:
        return Verdict(False, "bad_timestamp", delivery_id)
    if abs(now - int(timestamp)) > tolerance:
        return Verdict(False, "stale", delivery_id)
    try:
        expected = _mac(key, delivery_id, timestamp, body)
    except UnicodeEncodeError:  # a lone surrogate no bytes on the wire could have made
        return Verdict(False, "bad_signature", None)
    for item in signatures.split(" "):
        version, _, value = item.partition(",")
        if version != "v1":
            continue  # other schemes (v1a: asymmetric) are not used by AgentMail
        try:
            given = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue
        if hmac.compare_digest(given, expected):
            return Verdict(True, None, delivery_id)
    return Verdict(False, "bad_signature", delivery_id)


def read_event(body: bytes) -> Event | None:
    """The event in a verified delivery body, or None when it is not an event we can read:
    not JSON, nested deeper than 32 levels, a number longer than 64 digits, or an id we
    would record or send that is not valid text (a lone surrogate, NUL; the ledger and
    the API's URLs cannot hold it). A signed body is still outside input."""
    try:
        data = outside_json.loads(body, text=False)  # strings we do not use are not judged
    except outside_json.OutsideJsonError:
        return None
    if not isinstance(data, dict) or data.get("type") != "event":
        return None
    event_type, event_id = data.get("event_type"), data.get("event_id")
    if not isinstance(event_type, str) or not isinstance(event_id, str) or not event_id:
        return None
    if not (outside_json.text_ok(event_type) and outside_json.text_ok(event_id)):
        return None
    message = data.get("message")
    if not isinstance(message, dict):
        return Event(event_type, event_id)
    labels = message.get("labels")
    ids = {key: message.get(key) for key in ("inbox_id", "message_id", "thread_id")}
    if any(isinstance(v, str) and not outside_json.text_ok(v) for v in ids.values()):
        return None
    return Event(
        event_type,
        event_id,
        inbox_id=_str(ids["inbox_id"]),
        message_id=_str(ids["message_id"]),
        thread_id=_str(ids["thread_id"]),
        labels=tuple(x for x in labels if isinstance(x, str) and outside_json.text_ok(x))
        if isinstance(labels, list) else (),
    )


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
