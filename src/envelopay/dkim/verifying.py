"""Verification of every DKIM-Signature on an inbound message."""

from __future__ import annotations

import asyncio
import re

from envelopay.dkim.canon import _UNFOLD, split_message, to_crlf
from envelopay.dkim.fastpath import _fast_pass
from envelopay.dkim.lookup import DnsLookup
from envelopay.dkim.results import DkimResult, SignatureVerdict, aligned, summarize
from envelopay.errors import UsageError
from envelopay.protocol.headers import addresses

_SIGNATURE_LINE = re.compile(rb"(?im)^dkim-signature[ \t]*:")

def from_address_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The single From address, or None (absent, several, invalid): read exactly as the
    parser reads it (protocol.headers: the same fields, the same address rule)."""
    froms = [v for n, v in headers if n.lower() == b"from"]
    if len(froms) != 1:
        return None
    found = addresses(froms[0].replace(b"\r\n", b"").decode("utf-8", "replace").strip())
    return found[0] if len(found) == 1 else None


def from_domain_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The domain of the single From address, or None (absent, several, invalid)."""
    address = from_address_of(headers)
    return address.rpartition("@")[2] if address else None


_ANY_WSP = re.compile(r"\s+")


def _parse_tags(value: bytes) -> dict[str, str] | None:
    tags: dict[str, str] = {}
    text = _UNFOLD.sub(b"", value).decode("ascii", "replace")
    for spec in text.split(";"):
        if not spec.strip():
            continue
        key, eq, val = spec.partition("=")
        key = key.strip()
        if not eq or not key or key in tags:
            return None
        tags[key] = _ANY_WSP.sub("", val)
    return tags


# index of the signature -> (domain, selector, algorithm, the key's DNS name)
_Pending = dict[int, tuple[str, str, str, str]]


def _first_pass(
    sig_values: list[bytes], from_domain: str | None
) -> tuple[_Pending, dict[int, SignatureVerdict]]:
    """Tags and refusals of each signature: a verdict for those refused before any
    lookup, and the key names to fetch for the others."""
    pending: _Pending = {}
    verdicts: dict[int, SignatureVerdict] = {}
    for i, value in enumerate(sig_values):
        tags = _parse_tags(value)
        if tags is None or not {"v", "a", "b", "bh", "d", "h", "s"} <= tags.keys():
            verdicts[i] = SignatureVerdict(i, "fail", detail="malformed signature tags")
            continue
        d, s, a = tags["d"].lower(), tags["s"], tags["a"].lower()
        al = aligned(d, from_domain)
        if "l" in tags:
            verdicts[i] = SignatureVerdict(i, "fail", d, s, a, al, "l= body length refused")
        elif a not in ("rsa-sha256", "ed25519-sha256"):
            verdicts[i] = SignatureVerdict(i, "fail", d, s, a, al, f"algorithm {a} refused")
        else:
            pending[i] = (d, s, a, f"{s}._domainkey.{d}".lower())
    return pending, verdicts


async def _fetch_keys(names: list[str], dns: DnsLookup) -> dict[str, str | BaseException | None]:
    """Each key record by name: the record, None (no key), or the lookup's exception."""
    if len(names) == 1:  # the usual case: no gather (a task per lookup) for one name
        try:
            return {names[0]: await dns(names[0])}
        except Exception as exc:
            return {names[0]: exc}
    fetched = await asyncio.gather(*(dns(n) for n in names), return_exceptions=True)
    return dict(zip(names, fetched, strict=True))


def load_verifier() -> None:
    """Import what `verify` imports on first use (dkimpy, with dnspython and its HTTP
    stack: ~0.1 s here). A serving node calls it before its first message, so that
    message does not stall every other one on the event loop while modules load."""
    import dkim  # noqa: F401  # lazy: the point of this function (the CLI's start path stays light)


async def verify(raw: bytes, *, dns: DnsLookup) -> DkimResult:
    """Verify every DKIM-Signature on `raw`; never raises for anything in the message."""
    # lazy: keeps dkim off this module's import
    import dkim as dkimpy  # heavy-ish import kept off the CLI's start path

    msg = to_crlf(raw)
    try:
        headers, body = split_message(msg)
    except UsageError as exc:
        # Refused by the shared reader, so refused by the parser too: no From to vouch for.
        signed = _SIGNATURE_LINE.search(msg) is not None
        return DkimResult("fail" if signed else "none", detail=str(exc))
    from_address = from_address_of(headers)
    from_domain = from_address.rpartition("@")[2] if from_address else None
    sig_values = [v for n, v in headers if n.lower() == b"dkim-signature"]
    if not sig_values:
        return DkimResult("none", from_domain=from_domain, from_address=from_address)

    pending, verdicts = _first_pass(sig_values, from_domain)
    sig_headers = [(n, v) for n, v in headers if n.lower() == b"dkim-signature"]
    # The fast path needs our split to be exactly dkimpy's: a blank line after some
    # headers (the shared reader already refused white space before a colon, mbox
    # lines and bare CRs, which dkimpy reads its own way).
    fast = b"\r\n\r\n" in msg and not msg.startswith(b"\r\n")
    keys = await _fetch_keys(sorted({p[3] for p in pending.values()}), dns)

    checker = None
    for i, (d, s, a, name) in pending.items():
        al = aligned(d, from_domain)
        record = keys[name]
        if isinstance(record, BaseException):
            verdicts[i] = SignatureVerdict(i, "temperror", d, s, a, al, f"key lookup failed: {record}")
            continue
        if record is None:
            verdicts[i] = SignatureVerdict(i, "fail", d, s, a, al, f"no key at {name}")
            continue

        def dnsfunc(_name: bytes, timeout: int = 5, _rec: str = record) -> bytes:
            return _rec.encode("ascii", "replace")

        if fast and _fast_pass(headers, body, sig_headers[i], record):
            verdicts[i] = SignatureVerdict(i, "pass", d, s, a, al, "")
            continue
        try:
            if checker is None:
                checker = dkimpy.DKIM(msg)  # parses the message; hostile headers raise here
            ok = bool(checker.verify(idx=i, dnsfunc=dnsfunc))
            detail = "" if ok else "signature does not verify"
        # A trust boundary: dkimpy raises assorted errors on hostile input; each is a fail.
        except Exception as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        verdicts[i] = SignatureVerdict(i, "pass" if ok else "fail", d, s, a, al, detail)

    ordered = tuple(verdicts[i] for i in range(len(sig_values)))
    # Duplicate singletons never get here: the shared reader refuses them (a signer that
    # did not oversign lets a second Subject ride above the signed one).
    return summarize(ordered, from_domain, from_address)
