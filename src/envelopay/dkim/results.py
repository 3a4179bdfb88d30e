"""The values DKIM verification returns, and the alignment of a verdict with a From."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

DkimStatus = Literal["pass", "fail", "temperror", "none"]
DkimPolicy = Literal["required", "prefer", "off"]


@dataclass(frozen=True, slots=True)
class SignatureVerdict:
    """The verdict on one DKIM-Signature header (index 0 is the topmost)."""

    index: int
    status: Literal["pass", "fail", "temperror"]
    domain: str | None = None
    selector: str | None = None
    algorithm: str | None = None
    aligned: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class DkimResult:
    """The verdict on one inbound message's DKIM signatures.

    status  -- pass if at least one signature verifies; none if there is no signature;
               temperror if none passed and a key could not be fetched; else fail
    domain  -- the d= of the passing signature (or of the first signature seen)
    aligned -- the passing signature's domain equals (or is a parent of) the From domain
    signatures -- one SignatureVerdict per DKIM-Signature header, top to bottom
    from_domain -- the domain of the single From address (None if absent/several/invalid)
    source  -- "local" (verified here) or "authres" (a trusted Authentication-Results)
    from_address -- the single From address as the verifier read it (protocol.headers,
               then mail.addresses), domain lower-cased; what `dkim_aligned` compares
               with the From the engine acts on
    """

    status: DkimStatus
    domain: str | None = None
    aligned: bool = False
    detail: str = ""
    signatures: tuple[SignatureVerdict, ...] = field(default=())
    from_domain: str | None = None
    source: Literal["local", "authres"] = "local"
    from_address: str | None = None


def aligned(signing_domain: str | None, from_domain: str | None) -> bool:
    """Relaxed alignment, narrowed: d= equals the From domain or is a parent of it.

    RFC 7489 3.1.1 relaxed mode asks for equal Organizational Domains, which needs the
    public suffix list; without it we accept only d= at or above the From domain (never
    a sibling or a child), which every relaxed-aligned signer from the From's own
    domain satisfies."""
    if not signing_domain or not from_domain:
        return False
    d, f = signing_domain.lower().rstrip("."), from_domain.lower().rstrip(".")
    return f == d or f.endswith("." + d)


def summarize(
    signatures: tuple[SignatureVerdict, ...], from_domain: str | None, from_address: str | None = None
) -> DkimResult:
    """pass > temperror > fail; the aligned passing signature is preferred."""
    passing = [s for s in signatures if s.status == "pass"]
    fa = from_address
    if passing:
        best = next((s for s in passing if s.aligned), passing[0])
        return DkimResult("pass", best.domain, best.aligned, "", signatures, from_domain, from_address=fa)
    first = signatures[0]
    temp = [s for s in signatures if s.status == "temperror"]
    if temp:
        t = temp[0]
        return DkimResult("temperror", t.domain, False, t.detail, signatures, from_domain, from_address=fa)
    return DkimResult("fail", first.domain, False, first.detail, signatures, from_domain, from_address=fa)


def _same_address(a: str, b: str) -> bool:
    # Local parts compare exactly (RFC 5321 2.4), domains case-insensitively.
    la, _, da = a.strip().rpartition("@")
    lb, _, db = b.strip().rpartition("@")
    return bool(la) and la == lb and da.lower().rstrip(".") == db.lower().rstrip(".")


def dkim_aligned(result: DkimResult, from_address: str | None) -> bool:
    """True when `result` vouches for mail from `from_address`: the From the engine acts on.

    All three must hold:
    - the verdict is a pass;
    - the From the verifier read (`result.from_address`) is that same address, so a
      message two readers could read two ways never passes (issue 11, item 3);
    - a passing signature's d= aligns with that address's domain (`aligned`: relaxed,
      d= at or above the From domain; RFC 7489 3.1.1).
    A verdict from a trusted Authentication-Results (source "authres") carries no
    per-signature list; its d= (`result.domain`) is checked instead."""
    if result.status != "pass" or not from_address or not result.from_address:
        return False
    if not _same_address(result.from_address, from_address):
        return False
    domain = from_address.rpartition("@")[2]
    if result.signatures:
        return any(s.status == "pass" and aligned(s.domain, domain) for s in result.signatures)
    return aligned(result.domain, domain)
