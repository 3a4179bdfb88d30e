"""DKIM alignment with the From the engine acts on (issue 11, item 3).

The verifier reads its own From; the parser reads one too. A message two readers
read two ways (a signature by evil.test over a From the parser takes for
buyer@client.test) must never count as the buyer's. So the engine re-decides
`aligned` against the sender it will answer and credit: a passing signature whose
d= is that sender's domain or a parent of it, and (when the verifier says which From
it read) that same From. Under `required` a proof-carrying message without that is
refused `dkim_failed`; under `prefer` and `off` the outcome records the mismatch.

A verdict from our verifier carries the From it read (`DkimResult.from_address`): then
the shared rule decides (envelopay.dkim.dkim_aligned: the same address, and a passing
d= aligned with its domain). A verdict without it (a trusted Authentication-Results, or
one a caller built) is judged by its `from_domain` and signatures the same way.
"""

from __future__ import annotations

from dataclasses import replace

from envelopay.dkim import DkimResult, aligned
from envelopay.dkim import dkim_aligned as shared_dkim_aligned

__all__ = ["acted_on", "dkim_aligned", "dkim_label"]

def _domain(address: str) -> str:
    return address.rpartition("@")[2].lower().rstrip(".")


def dkim_aligned(result: DkimResult, from_address: str | None) -> bool:
    """Does `result` vouch for mail from `from_address`, the From acted on?"""
    if result.status != "pass" or not from_address or "@" not in from_address:
        return False
    if result.from_address:
        return shared_dkim_aligned(result, from_address)
    domain = _domain(from_address)
    if result.from_domain is not None and result.from_domain.lower().rstrip(".") != domain:
        return False
    elif result.from_domain is None and result.signatures:
        return False  # the verifier found no single From: it vouched for none
    if result.signatures:
        return any(s.status == "pass" and aligned(s.domain, domain) for s in result.signatures)
    return aligned(result.domain, domain)


def acted_on(result: DkimResult, sender: str | None) -> DkimResult:
    """`result` with `aligned` decided against `sender` (what the policy then reads)."""
    return replace(result, aligned=dkim_aligned(result, sender))


def dkim_label(result: DkimResult | None, sender: str | None) -> str | None:
    """A short record of the verdict for the outcome; None when there was none."""
    if result is None:
        return None
    if result.status != "pass":
        return result.status
    return "pass, aligned" if dkim_aligned(result, sender) else "pass, not aligned with From"
