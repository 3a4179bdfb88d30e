"""DKIM signing and verification (RFC 6376, RFC 8463). DNS is injected.

Signing is done here, not by dkimpy: dkimpy's pure-Python RSA takes about 8 ms per
signature (FIELD-NOTES), and outbound mail must sign at least 1,000 messages/s. The
canonicalization is relaxed/relaxed (written out below; it is short) and the signature
is computed with `cryptography` (RSA PKCS#1 v1.5 SHA-256, or Ed25519 over the SHA-256
digest as RFC 8463 specifies). The tests prove every signature verifies under dkimpy.

Signing rules (FIELD-NOTES "DKIM"):
- relaxed/relaxed, never `l=` (a body length lets appended text still verify);
- every header in FROZEN_HEADERS is listed once more than it occurs, absent ones
  included, so none can be added or duplicated after signing;
- the returned bytes are the bytes to send (CRLF line endings); never re-flatten them.

Verification checks every signature with dkimpy (`DKIM(msg).verify(idx=i)`) after the
keys have been fetched through the injected async `DnsLookup`, so a DNS failure is a
`temperror`, not a `fail`. Signatures carrying `l=` are refused. A fast path (below
`verify`) reaches dkimpy's verdict for a passing signature without re-parsing the
message, using dkimpy's own validation and canonicalization; anything else is dkimpy's.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from envelopay.errors import ConfigError, TransportError, UsageError

DkimStatus = Literal["pass", "fail", "temperror", "none"]
Algorithm = Literal["rsa-sha256", "ed25519-sha256"]
DkimPolicy = Literal["required", "prefer", "off"]

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
)
# Signed once per occurrence when present: they change how the body is read.
CONTENT_HEADERS: tuple[str, ...] = ("mime-version", "content-type", "content-transfer-encoding", "sender")


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
    """

    status: DkimStatus
    domain: str | None = None
    aligned: bool = False
    detail: str = ""
    signatures: tuple[SignatureVerdict, ...] = field(default=())
    from_domain: str | None = None
    source: Literal["local", "authres"] = "local"


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class DkimKey:
    """A private signing key: RSA (>= 1024 bits; 2048 generated) or Ed25519."""

    algorithm: Algorithm
    private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey

    @classmethod
    def generate_rsa(cls, bits: int = 2048) -> DkimKey:
        if bits < 2048:
            raise UsageError("RSA DKIM keys are generated with at least 2048 bits")
        return cls("rsa-sha256", rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @classmethod
    def generate_ed25519(cls) -> DkimKey:
        return cls("ed25519-sha256", ed25519.Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes | str, password: bytes | None = None) -> DkimKey:
        """Load an RSA or Ed25519 private key from PEM (PKCS#1 or PKCS#8)."""
        raw = data.encode("ascii") if isinstance(data, str) else data
        try:
            key = serialization.load_pem_private_key(raw, password=password)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"DKIM key: not a PEM private key ({exc})") from exc
        if isinstance(key, rsa.RSAPrivateKey):
            if key.key_size < 1024:
                raise ConfigError("DKIM key: RSA key shorter than 1024 bits")
            return cls("rsa-sha256", key)
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return cls("ed25519-sha256", key)
        raise ConfigError(f"DKIM key: unsupported key type {type(key).__name__}")

    @classmethod
    def from_ed25519_seed(cls, seed_b64: bytes | str) -> DkimKey:
        """Load an Ed25519 key from its base64 32-byte seed (dkimpy's key format)."""
        try:
            seed = base64.b64decode(seed_b64, validate=True)
        except ValueError as exc:
            raise ConfigError("DKIM key: Ed25519 seed is not base64") from exc
        if len(seed) != 32:
            raise ConfigError("DKIM key: Ed25519 seed must be 32 bytes")
        return cls("ed25519-sha256", ed25519.Ed25519PrivateKey.from_private_bytes(seed))

    @classmethod
    def load(cls, data: bytes | str) -> DkimKey:
        """PEM if it looks like PEM, else a base64 Ed25519 seed."""
        text = data.decode("ascii", "replace") if isinstance(data, bytes) else data
        if "-----BEGIN" in text:
            return cls.from_pem(text)
        return cls.from_ed25519_seed(text.strip())

    def private_pem(self) -> bytes:
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def ed25519_seed_b64(self) -> str:
        if not isinstance(self.private, ed25519.Ed25519PrivateKey):
            raise UsageError("not an Ed25519 key")
        raw = self.private.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return base64.b64encode(raw).decode("ascii")

    def public_b64(self) -> str:
        """The p= value: DER SubjectPublicKeyInfo for RSA, the raw 32 bytes for Ed25519."""
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            pub = self.private.public_key().public_bytes(
                serialization.Encoding.Raw, serialization.PublicFormat.Raw
            )
        else:
            pub = self.private.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        return base64.b64encode(pub).decode("ascii")

    def dns_txt_record(self) -> str:
        """The TXT record to publish at <selector>._domainkey.<domain>."""
        k = "ed25519" if self.algorithm == "ed25519-sha256" else "rsa"
        return f"v=DKIM1; k={k}; p={self.public_b64()}"

    def _sign_digest_input(self, header_data: bytes) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            # RFC 8463: Ed25519 signs the SHA-256 hash of the canonicalized data.
            return self.private.sign(hashlib.sha256(header_data).digest())
        return self.private.sign(header_data, padding.PKCS1v15(), hashes.SHA256())


# ------------------------------------------------------------- canonicalization

_WSP_RUN = re.compile(rb"[\t ]+")
_TRAILING_WSP = re.compile(rb"[\t ]+\r\n")
_UNFOLD = re.compile(rb"\r?\n")
_HEADER_NAME = re.compile(rb"[\x21-\x39\x3b-\x7e]+")
_TAG_SAFE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")


def to_crlf(raw: bytes) -> bytes:
    """Every line ending as CRLF (SMTP sends CRLF; signing must see the sent bytes)."""
    if b"\n" not in raw:
        return raw
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def split_message(raw: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Split CRLF bytes into [(name, value-with-CRLF)] and the body (after the blank line).

    Raises UsageError when a header line is neither a field nor a continuation."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        if raw.startswith(b"\r\n"):
            head, body = b"", raw[2:]
        else:
            head, body = raw, b""
            if head.endswith(b"\r\n"):
                head = head[:-2]
    headers: list[tuple[bytes, bytes]] = []
    if not head:
        return headers, body
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not headers:
                raise UsageError("message starts with a header continuation line")
            name, value = headers[-1]
            headers[-1] = (name, value + line + b"\r\n")
            continue
        colon = line.find(b":")
        if colon <= 0 or _HEADER_NAME.fullmatch(line[:colon].rstrip(b" \t")) is None:
            raise UsageError(f"malformed header line: {line[:60]!r}")
        headers.append((line[:colon], line[colon + 1 :] + b"\r\n"))
    return headers, body


def relaxed_header(name: bytes, value: bytes) -> bytes:
    """RFC 6376 3.4.2, including the trailing CRLF."""
    value = _WSP_RUN.sub(b" ", _UNFOLD.sub(b"", value)).strip(b" ")
    return name.lower().rstrip(b" \t") + b":" + value + b"\r\n"


def relaxed_body(body: bytes) -> bytes:
    """RFC 6376 3.4.4: WSP runs to one SP, none at line ends, no trailing empty lines."""
    body = _WSP_RUN.sub(b" ", _TRAILING_WSP.sub(b"\r\n", body))
    if body.endswith(b" "):  # a last line without CRLF may still end in WSP
        body = body.rstrip(b" ")
    while body.endswith(b"\r\n"):
        body = body[:-2]
    return body + b"\r\n" if body else b""


def _select(headers: list[tuple[bytes, bytes]], names: Iterable[str]) -> list[tuple[bytes, bytes]]:
    """Instances to hash, taking each name's occurrences from the bottom up (RFC 6376 5.4.2)."""
    positions: dict[bytes, list[int]] = {}
    for i, (name, _) in enumerate(headers):
        positions.setdefault(name.lower().rstrip(b" \t"), []).append(i)
    chosen: list[tuple[bytes, bytes]] = []
    for n in names:
        stack = positions.get(n.encode("ascii"))
        if stack:
            chosen.append(headers[stack.pop()])
    return chosen


def _fold_list(items: list[str], width: int = 68) -> str:
    lines: list[str] = []
    current = ""
    for item in items:
        piece = item if not current else ":" + item
        if current and len(current) + len(piece) > width:
            lines.append(current + ":")
            current = item
        else:
            current += piece
    lines.append(current)
    return "\r\n\t".join(lines)


def _fold_b64(value: str, first: int = 60, width: int = 72) -> str:
    chunks = [value[:first]] + [value[i : i + width] for i in range(first, len(value), width)]
    return "\r\n\t".join(c for c in chunks if c)


# ----------------------------------------------------------------------- sign


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


# --------------------------------------------------------------------- verify

DnsLookup = Callable[[str], Awaitable[str | None]]
"""Fetch the TXT record at a name (no trailing dot): the joined text, or None when the
name or the record does not exist. Raise (any exception) for a temporary failure."""


class DnsTemporaryError(TransportError):
    """A DNS lookup failed for a reason that may pass (timeout, SERVFAIL)."""


def table_dns(records: Mapping[str, str]) -> DnsLookup:
    """A DnsLookup backed by a dict name→TXT; names absent from the dict don't exist.

    A value of the form "!temperror" makes the lookup fail temporarily (for tests)."""
    table = {k.rstrip(".").lower(): v for k, v in records.items()}

    async def lookup(name: str) -> str | None:
        value = table.get(name.rstrip(".").lower())
        if value == "!temperror":
            raise DnsTemporaryError(f"lookup of {name} failed temporarily")
        return value

    return lookup


def resolver_dns(timeout: float = 5.0, *, nameservers: list[str] | None = None, port: int = 53) -> DnsLookup:
    """A DnsLookup on dnspython's asyncio resolver (resolv.conf unless nameservers given)."""
    import dns.asyncresolver
    import dns.exception
    import dns.resolver

    try:
        resolver = dns.asyncresolver.Resolver(configure=nameservers is None)
    except dns.resolver.NoResolverConfiguration as exc:
        raise ConfigError("no DNS resolver configured (resolv.conf) for DKIM key lookups") from exc
    if nameservers is not None:
        resolver.nameservers = list(nameservers)
        resolver.port = port
    resolver.lifetime = timeout

    async def lookup(name: str) -> str | None:
        try:
            answer = await resolver.resolve(name.rstrip(".") + ".", "TXT")
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None
        except dns.exception.DNSException as exc:
            raise DnsTemporaryError(f"{name}: {type(exc).__name__}") from exc
        # A TXT record's character-strings are one value joined without separators.
        for rdata in answer:
            return b"".join(rdata.strings).decode("ascii", "replace")
        return None

    return lookup


_FROM_ADDR = re.compile(rb"<([^<>]*)>\s*$")


def from_domain_of(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The domain of the single From address, or None (absent, several, invalid)."""
    from envelopay.mail.addresses import Address, parse_address

    froms = [v for n, v in headers if n.lower().rstrip(b" \t") == b"from"]
    if len(froms) != 1:
        return None
    value = _WSP_RUN.sub(b" ", _UNFOLD.sub(b"", froms[0])).strip(b" ")
    try:
        text = value.decode("ascii")
    except UnicodeDecodeError:
        return None
    parsed = parse_address(text, allow_display_name=True)
    return parsed.domain if isinstance(parsed, Address) else None


def aligned(signing_domain: str | None, from_domain: str | None) -> bool:
    """Relaxed alignment: d= equals the From domain or is a parent of it."""
    if not signing_domain or not from_domain:
        return False
    d, f = signing_domain.lower().rstrip("."), from_domain.lower().rstrip(".")
    return f == d or f.endswith("." + d)


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
        tags[key] = re.sub(r"\s+", "", val)
    return tags


async def verify(raw: bytes, *, dns: DnsLookup) -> DkimResult:
    """Verify every DKIM-Signature on `raw`; never raises for anything in the message."""
    import dkim as dkimpy  # heavy-ish import kept off the CLI's start path

    msg = to_crlf(raw)
    try:
        headers, body = split_message(msg)
    except UsageError as exc:
        return DkimResult("fail", detail=f"unparseable header: {exc}")
    from_domain = from_domain_of(headers)
    sig_values = [v for n, v in headers if n.lower().rstrip(b" \t") == b"dkim-signature"]
    if not sig_values:
        return DkimResult("none", from_domain=from_domain)

    # First pass: tags, refusals, and the key names to fetch.
    pending: dict[int, tuple[str, str, str, str]] = {}  # index -> (domain, selector, alg, name)
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

    sig_headers = [(n, v) for n, v in headers if n.lower().rstrip(b" \t") == b"dkim-signature"]
    # The fast path needs our split to be exactly dkimpy's: a blank line after some
    # headers, and no white space before any colon (dkimpy refuses such a header).
    fast = b"\r\n\r\n" in msg and not msg.startswith(b"\r\n") and all(
        n[-1:] not in (b" ", b"\t") for n, _ in headers
    )
    names = sorted({p[3] for p in pending.values()})
    keys: dict[str, str | BaseException | None] = {}
    if len(names) == 1:  # the usual case: no gather (a task per lookup) for one name
        try:
            keys[names[0]] = await dns(names[0])
        except Exception as exc:
            keys[names[0]] = exc
    else:
        fetched = await asyncio.gather(*(dns(n) for n in names), return_exceptions=True)
        keys.update(zip(names, fetched, strict=True))

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
    result = summarize(ordered, from_domain)
    dup = duplicate_singletons(headers)
    if dup and result.status == "pass":
        # A signer that did not oversign lets a second Subject (say) ride above the
        # signed one, and most readers take the first: the pass would vouch for text
        # nobody signed (DESIGN: reject inbound mail with duplicate singleton headers).
        return replace(result, status="fail", aligned=False, detail=f"duplicate header: {', '.join(dup)}")
    return result


# ------------------------------------------------------- verify, fast path
#
# dkimpy's `DKIM(msg).verify()` parses the whole message, canonicalizes every header,
# parses the key record and checks RSA in pure Python on every call. The fast path
# below does the same steps with dkimpy's own functions (tag parsing, field
# validation, key evaluation, header selection, canonicalization), but on headers
# already split, with parsed keys cached per record text and the signature checked by
# `cryptography` / PyNaCl. It only ever says "passes": anything else (a failure, an
# error, an unusual case) goes to dkimpy, whose verdict and detail stand as before.

_KEYS: dict[str, tuple[Any, int, bytes]] = {}  # record text → (verifier, key bits, k= tag)
_KEYS_MAX = 512


def _public_key(record: str) -> tuple[Any, int, bytes] | None:
    hit = _KEYS.get(record)
    if hit is not None:
        return hit
    from dkim import evaluate_pk

    pk, keysize, ktag, tlsrpt = evaluate_pk(b"", record.encode("ascii", "replace"))
    if tlsrpt or ktag not in (b"rsa", b"ed25519"):
        return None  # dkimpy refuses a tlsrpt-only key for mail: let it say so
    verifier: Any = pk
    if ktag == b"rsa":
        verifier = rsa.RSAPublicNumbers(pk["publicExponent"], pk["modulus"]).public_key()
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.pop(next(iter(_KEYS)))
    _KEYS[record] = hit = (verifier, int(keysize), ktag)
    return hit


def _fast_pass(
    headers: list[tuple[bytes, bytes]], body: bytes, sig_header: tuple[bytes, bytes], record: str
) -> bool:
    """True when this signature verifies exactly as `dkim.DKIM(msg).verify()` would
    find; False when dkimpy must look (it may still pass, or fail with its reason)."""
    try:
        return _fast_check(headers, body, sig_header, record)
    except Exception:  # hostile or unusual input: dkimpy's path gives the verdict
        return False


def _fast_check(
    headers: list[tuple[bytes, bytes]], body: bytes, sig_header: tuple[bytes, bytes], record: str
) -> bool:
    from dkim import RE_BTAG, select_headers, validate_signature_fields
    from dkim.canonicalization import CanonicalizationPolicy
    from dkim.util import parse_tag_value

    sig = parse_tag_value(sig_header[1])
    validate_signature_fields(sig)  # the same checks (and clock) as dkimpy's verify
    if sig[b"a"] not in (b"rsa-sha256", b"ed25519-sha256") or b"l" in sig:
        return False
    key = _public_key(record)
    if key is None:
        return False
    verifier, bits, ktag = key
    policy = CanonicalizationPolicy.from_c_value(sig.get(b"c", b"simple/simple"))
    bh = base64.b64decode(re.sub(rb"\s+", b"", sig[b"bh"]))
    if hashlib.sha256(policy.canonicalize_body(body)).digest() != bh:
        return False
    include = [x.lower() for x in re.split(rb"\s*:\s*", sig[b"h"])]
    if b"from" in include:
        include.append(b"from")  # dkimpy hashes one From more (its bug#644046 rule)
    signed = policy.canonicalize_headers(select_headers(headers, include))
    own = policy.canonicalize_headers([(sig_header[0], RE_BTAG.sub(b"\\1", sig_header[1]))])
    data = b"".join(n + b":" + v for n, v in signed) + b"".join(n + b":" + v.rstrip() for n, v in own)
    digest = hashlib.sha256(data).digest()
    signature = base64.b64decode(re.sub(rb"\s+", b"", sig[b"b"]))
    if ktag == b"ed25519":
        verifier.verify(digest, signature)  # raises BadSignatureError: dkimpy decides
        return True
    if bits < 1024:
        return False  # dkimpy refuses short keys with its own message
    verifier.verify(signature, digest, padding.PKCS1v15(), Prehashed(hashes.SHA256()))
    return True


# RFC 5322 3.6: fields that occur at most once.
SINGLETON_HEADERS: tuple[str, ...] = (
    "from",
    "sender",
    "reply-to",
    "to",
    "cc",
    "bcc",
    "subject",
    "date",
    "message-id",
    "in-reply-to",
    "references",
    "x-envelopay-type",
)


def duplicate_singletons(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """Names of singleton header fields that occur more than once."""
    counts: dict[str, int] = {}
    for name, _ in headers:
        key = name.lower().rstrip(b" \t").decode("ascii", "replace")
        counts[key] = counts.get(key, 0) + 1
    return [n for n in SINGLETON_HEADERS if counts.get(n, 0) > 1]


def summarize(signatures: tuple[SignatureVerdict, ...], from_domain: str | None) -> DkimResult:
    """pass > temperror > fail; the aligned passing signature is preferred."""
    passing = [s for s in signatures if s.status == "pass"]
    if passing:
        best = next((s for s in passing if s.aligned), passing[0])
        return DkimResult("pass", best.domain, best.aligned, "", signatures, from_domain)
    first = signatures[0]
    temp = [s for s in signatures if s.status == "temperror"]
    if temp:
        return DkimResult("temperror", temp[0].domain, False, temp[0].detail, signatures, from_domain)
    return DkimResult("fail", first.domain, False, first.detail, signatures, from_domain)


# ------------------------------------------------------- Authentication-Results

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
    from_domain = from_domain_of(headers)
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
        )
        rank = {"pass": 3, "temperror": 2, "fail": 1, "none": 0}
        if best is None or (rank[candidate.status], candidate.aligned) > (rank[best.status], best.aligned):
            best = candidate
    return best


def strip_authres(raw: bytes, *, authserv_id: str) -> bytes:
    """Remove every Authentication-Results header claiming `authserv_id` (a gateway
    does this to inbound mail before adding its own)."""
    msg = to_crlf(raw)
    head, sep, body = msg.partition(b"\r\n\r\n")
    out: list[bytes] = []
    dropping = False
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            if not dropping:
                out.append(line)
            continue
        name, _, value = line.partition(b":")
        dropping = False
        if name.strip().lower() == b"authentication-results":
            first = _COMMENT.sub(" ", value.decode("ascii", "replace")).split(";")[0].split()
            dropping = bool(first) and first[0].lower() == authserv_id.lower()
        if not dropping:
            out.append(line)
    return b"\r\n".join(out) + sep + body


# --------------------------------------------------------------------- policy

PROOF_CARRYING: frozenset[str] = frozenset({"PAY", "OFFER", "ACCEPT"})


def is_proof_carrying(message_type: str | None, *, prepaid_order: bool = False) -> bool:
    """PAY, OFFER, ACCEPT, and an ORDER that carries a payment proof."""
    if message_type is None:
        return False
    return message_type.upper() in PROOF_CARRYING or (message_type.upper() == "ORDER" and prepaid_order)


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """What a mailbox does with a message given its DKIM verdict.

    action -- accept: go on; reject: answer OOPS `oops`; defer: keep the message and
              retry later (a DNS temperror is not the sender's fault)
    """

    action: Literal["accept", "reject", "defer"]
    result: DkimResult
    oops: str | None = None
    reason: str = ""


def apply_policy(
    result: DkimResult,
    policy: DkimPolicy,
    *,
    proof_carrying: bool,
    authres: DkimResult | None = None,
) -> PolicyDecision:
    """Apply a mailbox's DKIM policy (`required`, `prefer`, `off`).

    A trusted Authentication-Results verdict (see `trusted_authres`) stands in for the
    local one when the local one did not pass (e.g. a forwarder broke nothing our
    gateway saw, or the key is unreachable from here).

    required -- a proof-carrying message needs an aligned pass, else OOPS dkim_failed
                (temperror defers); other messages are treated as under `prefer`
    prefer   -- a present but failing signature gets dkim_failed; absent is recorded
    off      -- everything is accepted; the verdict is still recorded
    """
    effective = result
    if result.status != "pass" and authres is not None and authres.status == "pass":
        effective = authres
    if policy == "off":
        return PolicyDecision("accept", effective, reason="dkim policy off")
    if policy == "required" and proof_carrying:
        if effective.status == "pass" and effective.aligned:
            return PolicyDecision("accept", effective, reason="aligned pass")
        if effective.status == "temperror":
            return PolicyDecision("defer", effective, reason="key lookup failed temporarily")
        why = "pass not aligned with From" if effective.status == "pass" else f"dkim {effective.status}"
        return PolicyDecision("reject", effective, "dkim_failed", why)
    if effective.status == "fail":
        return PolicyDecision("reject", effective, "dkim_failed", effective.detail or "dkim fail")
    return PolicyDecision("accept", effective, reason=f"dkim {effective.status}")
