"""Signing: relaxed/relaxed, oversigned, never l=; the returned bytes are the ones to send.

`sign` signs one message; `DkimSigner` is the one signer every sending path holds (the
engine's outbox, the enforcer, `call`, the responders, `mail reply`): a key, a selector,
a domain and a clock for t=.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from envelopay.dkim.canon import (
    _fold_b64,
    _fold_list,
    _select,
    relaxed_body,
    relaxed_header,
    split_message,
    to_crlf,
)
from envelopay.dkim.keys import DkimKey
from envelopay.errors import UsageError

# Headers oversigned (listed count+1 times) so that none can be added after signing.
FROZEN_HEADERS: tuple[str, ...] = (
    "from",
    "to",
    "cc",
    "subject",
    "date",
    "message-id",
    "in-reply-to",
    "references",
    "reply-to",
    "x-envelopay-type",
    "auto-submitted",  # RFC 3834: a robot's mark; removing or adding one must break the signature
)
# Signed once per occurrence when present: they change how the body is read.
CONTENT_HEADERS: tuple[str, ...] = ("mime-version", "content-type", "content-transfer-encoding", "sender")

__all__ = ["CONTENT_HEADERS", "FROZEN_HEADERS", "DkimSigner", "Signer", "dkim_signer", "sign"]

# What a sending path holds when it may sign: exact bytes in, the bytes to send out.
Signer = Callable[[bytes], bytes]
# A clock for t=: a datetime, or seconds since the epoch (the enforcer's clocks).
SignClock = Callable[[], "datetime | float"]

_TAG_SAFE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def sign(
    raw: bytes,
    *,
    selector: str,
    domain: str,
    key: DkimKey,
    timestamp: int | None = None,
    extra_headers: Iterable[str] = (),
) -> bytes:
    """Return `raw` (as CRLF) with a DKIM-Signature prepended. Send exactly these bytes.

    timestamp -- the t= value (seconds since the epoch), injected; omitted when None
    extra_headers -- further header names to sign once per occurrence
    """
    if not _TAG_SAFE.fullmatch(selector) or not _TAG_SAFE.fullmatch(domain):
        raise UsageError(f"DKIM selector/domain must be DNS names: {selector!r}, {domain!r}")
    msg = to_crlf(raw)
    if not msg.endswith(b"\r\n"):
        # SMTP adds the final CRLF anyway; add it here so the signed bytes are the sent ones.
        msg += b"\r\n"
    headers, body = split_message(msg)
    present: dict[str, int] = {}
    for name, _ in headers:
        lower = name.lower().rstrip(b" \t").decode("ascii")
        present[lower] = present.get(lower, 0) + 1
    signed: list[str] = []
    for n in FROZEN_HEADERS:
        signed.extend([n] * (present.get(n, 0) + 1))
    for n in (*CONTENT_HEADERS, *(h.lower() for h in extra_headers)):
        if n not in FROZEN_HEADERS and n != "dkim-signature":
            signed.extend([n] * present.get(n, 0))

    body_hash = base64.b64encode(hashlib.sha256(relaxed_body(body)).digest()).decode("ascii")
    tags = f"v=1; a={key.algorithm}; c=relaxed/relaxed;\r\n\td={domain}; s={selector};"
    if timestamp is not None:
        tags += f" t={int(timestamp)};"
    value = f" {tags}\r\n\th={_fold_list(signed)};\r\n\tbh={body_hash};\r\n\tb="
    data = b"".join(relaxed_header(n, v) for n, v in _select(headers, signed))
    # The signature header itself is hashed with an empty b= and no trailing CRLF.
    data += relaxed_header(b"DKIM-Signature", value.encode("ascii"))[:-2]
    signature = base64.b64encode(key._sign_digest_input(data)).decode("ascii")
    header = f"DKIM-Signature:{value}{_fold_b64(signature)}\r\n".encode("ascii")
    return header + msg


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class DkimSigner:
    """Signs outgoing mail with d=`domain`. `sign_at` stamps t= from a given time (the
    outbox row's Date, so a resend of the row is the same mail, signature and all);
    calling it plainly stamps the clock's time (mail that has no row)."""

    selector: str
    domain: str
    key: DkimKey
    clock: SignClock = field(default=_now)

    def sign_at(self, raw: bytes, at: datetime | float) -> bytes:
        stamp = at.timestamp() if isinstance(at, datetime) else at
        return sign(raw, selector=self.selector, domain=self.domain, key=self.key, timestamp=int(stamp))

    def __call__(self, raw: bytes) -> bytes:
        return self.sign_at(raw, self.clock())


def dkim_signer(key: DkimKey | bytes, *, selector: str, domain: str, clock: SignClock = _now) -> DkimSigner:
    """The signer for `key` (a DkimKey, or its PEM bytes)."""
    loaded = key if isinstance(key, DkimKey) else DkimKey.load(key)
    return DkimSigner(selector, domain, loaded, clock)
