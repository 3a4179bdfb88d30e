"""The rail contract: how a chain plugin verifies proofs and makes payments.

No chain library is imported here. Rail plugins live in the top-level rails/ folder
as their own distributions and register under the entry point group `envelopay.rails`.
A verdict about someone else's proof is a value (`Verdict`), never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Literal, Protocol, runtime_checkable

from envelopay.protocol.codes import OopsCode

ENTRY_POINT_GROUP = "envelopay.rails"

AmountPolicy = Literal["exact", "at_least"]
Commitment = Literal["processed", "confirmed", "finalized"]


class Reason(StrEnum):
    """Stable reason codes for a rejected / pending / unavailable verdict."""

    TX_NOT_FOUND = "tx_not_found"
    TX_FAILED = "tx_failed"
    NOT_FINAL = "not_final"
    AMOUNT_MISMATCH = "amount_mismatch"
    RECIPIENT_MISMATCH = "recipient_mismatch"
    TOKEN_MISMATCH = "token_mismatch"
    CHAIN_MISMATCH = "chain_mismatch"
    PAYER_MISMATCH = "payer_mismatch"
    AMBIGUOUS_TRANSFER = "ambiguous_transfer"
    STALE = "stale"
    MALFORMED_PROOF = "malformed_proof"
    UNSUPPORTED_ASSET = "unsupported_asset"
    RPC_UNAVAILABLE = "rpc_unavailable"
    # paying side only
    INSUFFICIENT_FUNDS = "insufficient_funds"


# The one place rail reasons become OOPS codes (spec codes where one fits).
REASON_TO_OOPS: dict[Reason, OopsCode] = {
    Reason.TX_NOT_FOUND: OopsCode.TX_NOT_FOUND,
    Reason.TX_FAILED: OopsCode.TX_FAILED,
    Reason.NOT_FINAL: OopsCode.NOT_FINAL,
    Reason.AMOUNT_MISMATCH: OopsCode.AMOUNT_MISMATCH,
    Reason.RECIPIENT_MISMATCH: OopsCode.RECIPIENT_MISMATCH,
    Reason.TOKEN_MISMATCH: OopsCode.TOKEN_MISMATCH,
    Reason.CHAIN_MISMATCH: OopsCode.CHAIN_MISMATCH,
    Reason.PAYER_MISMATCH: OopsCode.PAYER_MISMATCH,
    Reason.AMBIGUOUS_TRANSFER: OopsCode.AMOUNT_MISMATCH,
    Reason.STALE: OopsCode.STALE_PROOF,
    Reason.MALFORMED_PROOF: OopsCode.INVALID_FIELD,
    Reason.UNSUPPORTED_ASSET: OopsCode.UNSUPPORTED_RAIL,
    Reason.RPC_UNAVAILABLE: OopsCode.RAIL_UNAVAILABLE,
    Reason.INSUFFICIENT_FUNDS: OopsCode.INSUFFICIENT_FUNDS,
}


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a proof must show. `amount` is an int in the asset's smallest unit."""

    chain: str
    token: str
    amount: int
    recipient: str
    amount_policy: AmountPolicy = "exact"
    payer: str | None = None
    not_before: datetime | None = None
    not_after: datetime | None = None
    commitment: Commitment = "confirmed"  # Solana
    confirmations: int = 2  # EVM


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of verifying one proof. Construct with the classmethods."""

    status: Literal["ok", "rejected", "pending", "unavailable"]
    reason: Reason | None = None
    detail: str = ""
    observed_amount: int | None = None
    payer: str | None = None
    tx_time: datetime | None = None
    proof_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def oops(self) -> OopsCode | None:
        """The OOPS code a receiver answers with, or None for an ok verdict."""
        if self.status == "ok":
            return None
        if self.reason is None:
            return OopsCode.RAIL_UNAVAILABLE if self.status == "unavailable" else OopsCode.NOT_FINAL
        return REASON_TO_OOPS[self.reason]

    @classmethod
    def accepted(
        cls,
        *,
        observed_amount: int,
        payer: str | None,
        tx_time: datetime | None,
        proof_key: str | None = None,
    ) -> Verdict:
        return cls("ok", None, "", observed_amount, payer, tx_time, proof_key)

    @classmethod
    def rejected(cls, reason: Reason, detail: str = "", *, observed_amount: int | None = None) -> Verdict:
        """`observed_amount`: what the transaction did pay, when the rail saw it (an
        AMOUNT_MISMATCH always carries it, so `verify` is not null where its detail has it)."""
        return cls("rejected", reason, detail, observed_amount)

    @classmethod
    def pending(cls, detail: str = "") -> Verdict:
        return cls("pending", Reason.NOT_FINAL, detail)

    @classmethod
    def unavailable(cls, detail: str = "") -> Verdict:
        return cls("unavailable", Reason.RPC_UNAVAILABLE, detail)

    def to_json(self) -> dict[str, Any]:
        doc = {
            "status": self.status,
            "reason": self.reason.value if self.reason else None,
            "detail": self.detail,
            "observed_amount": str(self.observed_amount) if self.observed_amount is not None else None,
            "payer": self.payer,
            "tx_time": self.tx_time.isoformat() if self.tx_time else None,
            "proof_key": self.proof_key,
            "oops": self.oops.value if self.oops else None,
        }
        # Where an accepted transaction landed, when the rail says (Solana's slot, an EVM
        # block): recorded with the verdict, for the evidence folder (SPEC.md "Evidence").
        for key in ("slot", "block"):
            if isinstance(self.extra.get(key), int):
                doc[key] = self.extra[key]
        return doc


@dataclass(frozen=True, slots=True)
class AssetInfo:
    """One entry of a rail's asset registry: (chain, symbol) → address and decimals."""

    chain: str
    symbol: str
    address: str | None  # None for the native asset
    decimals: int
    # Rail-specific asset standard, e.g. the Solana token program id (Token or
    # Token-2022) that owns the mint; None where the rail has only one.
    program: str | None = None

    @property
    def native(self) -> bool:
        return self.address is None


@runtime_checkable
class Rail(Protocol):
    """A payment rail plugin. Implementations live outside the core."""

    name: str

    @property
    def chains(self) -> tuple[str, ...]:
        """Chain names this instance verifies and pays on: the network its backend is
        bound to, e.g. ("solana-local",). `assets()` may list other networks too."""
        ...

    def assets(self) -> tuple[AssetInfo, ...]: ...

    def proof_key(self, proof: dict[str, Any]) -> str:
        """Canonical replay key for a proof: one spelling per transaction.

        Raises ValueError for a malformed proof (callers turn that into a verdict)."""
        ...

    async def verify(self, proof: dict[str, Any], expectation: Expectation) -> Verdict: ...

    async def pay(
        self,
        *,
        chain: str,
        token: str,
        amount: int,
        recipient: str,
    ) -> dict[str, Any]:
        """Make a payment from this rail's configured key; return the proof dict."""
        ...


@runtime_checkable
class AddressSyntax(Protocol):
    """What a rail knows of its chain's spelling, so a wallet, an asset and an amount are
    judged before anything is sent (issue 29: an EVM address went out in an INVOICE on
    Solana). Optional: a rail without it is judged by its asset registry alone."""

    def parse_address(self, chain: str, address: str) -> str:
        """The canonical spelling of a wallet or asset address on `chain`; ValueError
        (saying what is wrong) when `address` is no address there."""
        ...

    def max_amount(self, chain: str) -> int:
        """The largest amount one transfer on `chain` can carry (Solana: u64; EVM: u256)."""
        ...
