"""dkimpy's `DKIM(msg).verify()` parses the whole message, canonicalizes every header,
parses the key record and checks RSA in pure Python on every call. The fast path
below does the same steps with dkimpy's own functions (tag parsing, field
validation, key evaluation, header selection, canonicalization), but on headers
already split, with parsed keys cached per record text and the signature checked by
`cryptography` / PyNaCl. It only ever says "passes": anything else (a failure, an
error, an unusual case) goes to dkimpy, whose verdict and detail stand as before.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

_KEYS: dict[str, tuple[Any, int, bytes]] = {}  # record text → (verifier, key bits, k= tag)
_KEYS_MAX = 512


def _public_key(record: str) -> tuple[Any, int, bytes] | None:
    hit = _KEYS.get(record)
    if hit is not None:
        return hit
    from dkim import evaluate_pk  # lazy: keeps dkim off this module's import

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
    # lazy: keeps dkim off this module's import
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
