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

from envelopay.dkim.canon import _select, relaxed_body, relaxed_header

_WSP = re.compile(rb"\s+")
_TAG_LIST = re.compile(rb"\s*:\s*")

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
    from dkim import RE_BTAG, validate_signature_fields
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
    bh = base64.b64decode(_WSP.sub(b"", sig[b"bh"]))
    include = [x.lower() for x in _TAG_LIST.split(sig[b"h"])]
    if b"from" in include:
        include.append(b"from")  # dkimpy hashes one From more (its bug#644046 rule)
    # dkimpy's select_headers, each name's instances from the bottom up (RFC 6376 5.4.2):
    # the same as signing's; a name that is not ASCII raises, and dkimpy decides.
    selected = _select(headers, [name.decode("ascii") for name in include])
    own = (sig_header[0], RE_BTAG.sub(b"\\1", sig_header[1]))
    if _ours_agree(policy, body, (*selected, own)):
        body_hash = hashlib.sha256(relaxed_body(body)).digest()
        data = b"".join(relaxed_header(n, v) for n, v in selected) + relaxed_header(*own)[:-2]
    else:
        body_hash = hashlib.sha256(policy.canonicalize_body(body)).digest()
        signed = policy.canonicalize_headers(selected)
        data = b"".join(n + b":" + v for n, v in signed) + b"".join(
            n + b":" + v.rstrip() for n, v in policy.canonicalize_headers([own]))
    if body_hash != bh:
        return False
    digest = hashlib.sha256(data).digest()
    signature = base64.b64decode(_WSP.sub(b"", sig[b"b"]))
    if ktag == b"ed25519":
        verifier.verify(digest, signature)  # raises BadSignatureError: dkimpy decides
        return True
    if bits < 1024:
        return False  # dkimpy refuses short keys with its own message
    verifier.verify(signature, digest, padding.PKCS1v15(), Prehashed(hashes.SHA256()))
    return True


def _ours_agree(policy: Any, body: bytes, fields: tuple[tuple[bytes, bytes], ...]) -> bool:
    """Does our relaxed canonicalization (dkim/canon.py, the one we sign with, faster)
    give dkimpy's bytes here? For relaxed/relaxed it does, except where the two read
    RFC 6376 differently: a body not ending in CRLF (trailing WSP on its last line), and
    a field with a bare CR or a VT/FF (dkimpy's strip() takes them off the ends)."""
    if policy.header_algorithm.name != b"relaxed" or policy.body_algorithm.name != b"relaxed":
        return False
    if body and not body.endswith(b"\r\n"):
        return False
    for name, value in fields:
        if b"\x0b" in value or b"\x0c" in value or value.count(b"\r") != value.count(b"\r\n"):
            return False
        if name != name.rstrip():
            return False
    return True
