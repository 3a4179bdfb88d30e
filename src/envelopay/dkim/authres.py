"""Authentication-Results (RFC 8601): trusting a gateway's verdict, and stripping forged ones."""

from __future__ import annotations

import re

from envelopay.dkim.canon import _UNFOLD, split_message, to_crlf
from envelopay.dkim.results import DkimResult, DkimStatus, aligned
from envelopay.dkim.verifying import from_address_of
from envelopay.errors import UsageError
from envelopay.protocol.headers import HeaderRefusal, read_headers

_COMMENT = re.compile(r"\([^()]*\)")


def trusted_authres(raw: bytes, *, authserv_id: str) -> DkimResult | None:
    """The DKIM verdict of a trusted Authentication-Results header, if there is one.

    Only the topmost Authentication-Results header is considered (the receiving
    gateway prepends its own and must strip inbound ones claiming its id); it is
    trusted only when its authserv-id equals `authserv_id` exactly. Any other header,
    including lower ones claiming the same id, is ignored."""
    try:
        headers, _ = split_message(to_crlf(raw))
    except UsageError:
        return None
    ar = [v for n, v in headers if n.lower().rstrip(b" \t") == b"authentication-results"]
    if not ar:
        return None
    text = _COMMENT.sub(" ", _UNFOLD.sub(b"", ar[0]).decode("ascii", "replace"))
    parts = [p.strip() for p in text.split(";")]
    ident = parts[0].split()
    if not ident or ident[0].lower() != authserv_id.lower():
        return None
    from_address = from_address_of(headers)
    from_domain = from_address.rpartition("@")[2] if from_address else None
    best: DkimResult | None = None
    for resinfo in parts[1:]:
        words = resinfo.split()
        if not words or not words[0].lower().startswith("dkim="):
            continue
        result = words[0].split("=", 1)[1].lower()
        props = dict(w.split("=", 1) for w in words[1:] if "=" in w)
        d = (props.get("header.d") or props.get("header.i", "").lstrip("@").rpartition("@")[2]) or None
        status: DkimStatus
        if result == "pass":
            status = "pass"
        elif result in ("temperror",):
            status = "temperror"
        elif result == "none":
            status = "none"
        else:
            status = "fail"
        candidate = DkimResult(
            status,
            d,
            status == "pass" and aligned(d, from_domain),
            f"authres {result}",
            from_domain=from_domain,
            source="authres",
            from_address=from_address,
        )
        rank = {"pass": 3, "temperror": 2, "fail": 1, "none": 0}
        if best is None or (rank[candidate.status], candidate.aligned) > (rank[best.status], best.aligned):
            best = candidate
    return best


def strip_authres(raw: bytes, *, authserv_id: str) -> bytes:
    """Remove every Authentication-Results header claiming `authserv_id` (a gateway
    does this to inbound mail before adding its own). Every other field keeps its bytes
    (as CRLF). A header block the shared reader refuses is returned unchanged: every
    reader refuses it anyway."""
    msg = to_crlf(raw)
    read = read_headers(msg)
    if isinstance(read, HeaderRefusal):
        return msg
    kept = [
        f for f in read.fields
        if not (f.name == "authentication-results" and _claims(f.raw_value, authserv_id))
    ]
    if len(kept) == len(read.fields):
        return msg
    head = b"".join(f.raw_name + b":" + f.raw_value for f in kept)
    return head + b"\r\n" + read.body


def _claims(value: bytes, authserv_id: str) -> bool:
    first = _COMMENT.sub(" ", _UNFOLD.sub(b"", value).decode("ascii", "replace")).split(";")[0].split()
    return bool(first) and first[0].lower() == authserv_id.lower()
