"""OOPS error codes: the spec's six, and this implementation's documented extensions.

Every remote mistake is mapped to one of these codes in exactly one place per layer
(protocol.parse for message shape, rails.codes for proofs, flows for conversation).
"""

from __future__ import annotations

from enum import StrEnum


class OopsCode(StrEnum):
    # -- the six codes of Envelopay v0.1.0 ("Error codes: ...")
    TX_NOT_FOUND = "tx_not_found"
    AMOUNT_MISMATCH = "amount_mismatch"
    DKIM_FAILED = "dkim_failed"
    UNKNOWN_TYPE = "unknown_type"
    INSUFFICIENT_FUNDS = "insufficient_funds"
    MISSING_WALLET = "missing_wallet"
    # -- message-shape extensions (protocol.parse)
    INVALID_JSON = "invalid_json"
    MISSING_FIELD = "missing_field"
    INVALID_FIELD = "invalid_field"
    TYPE_MISMATCH = "type_mismatch"
    UNSUPPORTED_VERSION = "unsupported_version"
    # -- proof extensions (rails.codes maps rail reasons onto these)
    TX_FAILED = "tx_failed"
    NOT_FINAL = "not_final"
    RECIPIENT_MISMATCH = "recipient_mismatch"
    TOKEN_MISMATCH = "token_mismatch"
    CHAIN_MISMATCH = "chain_mismatch"
    PAYER_MISMATCH = "payer_mismatch"
    STALE_PROOF = "stale_proof"
    RAIL_UNAVAILABLE = "rail_unavailable"
    UNSUPPORTED_RAIL = "unsupported_rail"
    # -- conversation extensions (flows, replay, worker)
    UNEXPECTED_MESSAGE = "unexpected_message"
    UNKNOWN_REF = "unknown_ref"
    THREAD_CONFLICT = "thread_conflict"
    PROOF_REPLAYED = "proof_replayed"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_TASK = "unknown_task"
    TASK_FAILED = "task_failed"


SPEC_CODES: frozenset[OopsCode] = frozenset(
    {
        OopsCode.TX_NOT_FOUND,
        OopsCode.AMOUNT_MISMATCH,
        OopsCode.DKIM_FAILED,
        OopsCode.UNKNOWN_TYPE,
        OopsCode.INSUFFICIENT_FUNDS,
        OopsCode.MISSING_WALLET,
    }
)
