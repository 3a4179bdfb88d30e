"""The conformance kit fails rails that get things wrong: each deliberately broken rail
below must make the named check raise AssertionError."""

from __future__ import annotations

from typing import Any

import pytest

from envelopay.rails.interface import Expectation, Reason, Verdict
from envelopay.testing.rails import run_check
from envelopay_solana import LocalSolana, make_rail
from envelopay_solana.rail import SolanaRail

from .solana_harness import SolanaHarness


class AcceptsAnything(SolanaRail):
    """Accepts any transaction that exists: the classic mistake."""

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        verdict = await super().verify(proof, expectation)
        if verdict.status == "rejected" and verdict.reason != Reason.MALFORMED_PROOF:
            return Verdict.accepted(observed_amount=expectation.amount, payer=None, tx_time=None,
                                    proof_key=self.proof_key(proof))
        return verdict


class KeysOnSpelling(SolanaRail):
    """Keys replay protection on the proof's spelling instead of the transaction."""

    def proof_key(self, proof: dict[str, Any]) -> str:
        super().proof_key(proof)
        return str(proof["tx"])


class IgnoresFinality(SolanaRail):
    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict:
        verdict = await super().verify(proof, expectation)
        if verdict.status == "pending":
            return Verdict.accepted(observed_amount=expectation.amount, payer=None, tx_time=None)
        return verdict


def harness_with(cls: type[SolanaRail]) -> SolanaHarness:
    chain = LocalSolana()
    good = SolanaHarness.local_backend(chain)
    base = make_rail({"local_chain": chain, "keypair": bytes(good.payer_kp)})
    broken = cls(network="local", assets=base.assets(), local_chain=chain, keypair=good.payer_kp)
    return SolanaHarness(chain, broken, good.payer_kp)


@pytest.mark.parametrize(("cls", "check"), [
    (AcceptsAnything, "tx_failed"),
    (AcceptsAnything, "recipient_mismatch"),
    (AcceptsAnything, "token_mismatch"),
    (AcceptsAnything, "amount_policy"),
    (KeysOnSpelling, "proof_key"),
    (IgnoresFinality, "pending_then_final"),
])
async def test_broken_rails_fail_the_kit(cls: type[SolanaRail], check: str) -> None:
    with pytest.raises(AssertionError):
        await run_check(check, harness_with(cls))


async def test_the_unbroken_rail_passes_the_same_checks() -> None:
    h = harness_with(SolanaRail)
    for check in ("tx_failed", "recipient_mismatch", "token_mismatch", "amount_policy", "proof_key",
                  "pending_then_final"):
        await run_check(check, h)
