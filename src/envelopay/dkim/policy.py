"""A mailbox's DKIM policy (required / prefer / off) applied to a verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envelopay.dkim.results import DkimPolicy, DkimResult, dkim_aligned

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
    from_address: str | None = None,
) -> PolicyDecision:
    """Apply a mailbox's DKIM policy (`required`, `prefer`, `off`).

    A trusted Authentication-Results verdict (see `trusted_authres`) stands in for the
    local one when the local one did not pass (e.g. a forwarder broke nothing our
    gateway saw, or the key is unreachable from here).

    required -- a proof-carrying message needs an aligned pass, else OOPS dkim_failed
                (temperror defers); other messages are treated as under `prefer`
    prefer   -- a present but failing signature gets dkim_failed; absent is recorded
    off      -- everything is accepted; the verdict is still recorded

    from_address -- the From the caller acts on (Parsed.from_addr). Given, "aligned"
                means `dkim_aligned(verdict, from_address)`: the verifier read that same
                From and a passing d= aligns with it. Without it, the verdict's own
                `aligned` flag (the verifier's From) is used.
    """
    effective = result
    if result.status != "pass" and authres is not None and authres.status == "pass":
        effective = authres
    if policy == "off":
        return PolicyDecision("accept", effective, reason="dkim policy off")
    if policy == "required" and proof_carrying:
        ok = effective.aligned if from_address is None else dkim_aligned(effective, from_address)
        if effective.status == "pass" and ok:
            return PolicyDecision("accept", effective, reason="aligned pass")
        if effective.status == "temperror":
            return PolicyDecision("defer", effective, reason="key lookup failed temporarily")
        why = "pass not aligned with From" if effective.status == "pass" else f"dkim {effective.status}"
        return PolicyDecision("reject", effective, "dkim_failed", why)
    if effective.status == "fail":
        return PolicyDecision("reject", effective, "dkim_failed", effective.detail or "dkim fail")
    return PolicyDecision("accept", effective, reason=f"dkim {effective.status}")
