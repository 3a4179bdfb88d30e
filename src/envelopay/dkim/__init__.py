"""DKIM signing and verification (RFC 6376, RFC 8463). DNS is injected.

Signing is done here, not by dkimpy: dkimpy's pure-Python RSA takes about 8 ms per
signature (FIELD-NOTES), and outbound mail must sign at least 1,000 messages/s. The
canonicalization is relaxed/relaxed (`canon`; it is short) and the signature is
computed with `cryptography` (RSA PKCS#1 v1.5 SHA-256, or Ed25519 over the SHA-256
digest as RFC 8463 specifies). The tests prove every signature verifies under dkimpy.

Signing rules (FIELD-NOTES "DKIM"):
- relaxed/relaxed, never `l=` (a body length lets appended text still verify);
- every header in FROZEN_HEADERS is listed once more than it occurs, absent ones
  included, so none can be added or duplicated after signing;
- the returned bytes are the bytes to send (CRLF line endings); never re-flatten them.

Verification (`verifying`) reads the header block with protocol.headers, the reader
the parser, the enforcer and the garden share: a block it refuses fails here too.
Every signature is checked with dkimpy (`DKIM(msg).verify(idx=i)`) after the keys have
been fetched through the injected async `DnsLookup`, so a DNS failure is a
`temperror`, not a `fail`. Signatures carrying `l=` are refused. A fast path
(`fastpath`) reaches dkimpy's verdict for a passing signature without re-parsing.

The From that DKIM verified must be the From the engine acts on: `dkim_aligned(result,
from_address)` checks both that and the d= alignment (`results`).

Modules: keys, canon, signing, lookup, verifying, fastpath, results, authres, policy.
"""

from envelopay.dkim.authres import strip_authres, trusted_authres
from envelopay.dkim.canon import relaxed_body, relaxed_header, split_message, to_crlf
from envelopay.dkim.keys import Algorithm, DkimKey
from envelopay.dkim.lookup import DnsLookup, DnsTemporaryError, resolver_dns, table_dns
from envelopay.dkim.policy import PROOF_CARRYING, PolicyDecision, apply_policy, is_proof_carrying
from envelopay.dkim.results import (
    DkimPolicy,
    DkimResult,
    DkimStatus,
    SignatureVerdict,
    aligned,
    dkim_aligned,
    summarize,
)
from envelopay.dkim.signing import CONTENT_HEADERS, FROZEN_HEADERS, DkimSigner, Signer, dkim_signer, sign
from envelopay.dkim.verifying import from_address_of, from_domain_of, load_verifier, verify

__all__ = [
    "CONTENT_HEADERS",
    "FROZEN_HEADERS",
    "PROOF_CARRYING",
    "Algorithm",
    "DkimKey",
    "DkimPolicy",
    "DkimResult",
    "DkimSigner",
    "DkimStatus",
    "DnsLookup",
    "DnsTemporaryError",
    "PolicyDecision",
    "SignatureVerdict",
    "Signer",
    "aligned",
    "apply_policy",
    "dkim_aligned",
    "dkim_signer",
    "from_address_of",
    "from_domain_of",
    "is_proof_carrying",
    "load_verifier",
    "relaxed_body",
    "relaxed_header",
    "resolver_dns",
    "sign",
    "split_message",
    "strip_authres",
    "summarize",
    "table_dns",
    "to_crlf",
    "trusted_authres",
    "verify",
]
