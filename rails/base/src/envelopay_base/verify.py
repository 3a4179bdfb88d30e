"""Pure proof verification for the Base (EVM) rail: no I/O, no clock.

Both backends (JSON-RPC and the eth-tester local chain) read the same four things —
the transaction, its receipt, its block and the head block number — plus the chain
id, and hand them to `check_payment`, which returns a Verdict. Inputs are JSON-RPC
shaped dicts (camelCase keys); quantities may be hex strings or ints.

Check order: right chain → found → mined → succeeded → asset / recipient / payer /
amount → freshness → confirmations. Content failures are final (rejected); a correct
transfer that is not yet deep enough is pending.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec

from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict
from envelopay_base.assets import norm_address

# keccak256("Transfer(address,address,uint256)")
TRANSFER_TOPIC = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

_HASH = re.compile(r"^(0x)?[0-9a-f]{64}$")


class MalformedAnswer(ValueError):
    """The node's answer does not have the shape JSON-RPC promises."""


def canonical_tx_hash(proof: Mapping[str, Any]) -> str:
    """The one spelling of a proof's transaction: lowercase, 0x-prefixed, 32 bytes.

    Any letter case and a missing 0x give the same key; anything else is ValueError."""
    if not isinstance(proof, Mapping):
        raise ValueError("proof must be an object")
    tx = proof.get("tx")
    if not isinstance(tx, str):
        raise ValueError('proof needs "tx": a 0x-prefixed 32-byte transaction hash')
    lowered = tx.lower()
    if not _HASH.match(lowered):
        raise ValueError(f"not a 32-byte transaction hash: {tx[:80]!r}")
    return lowered if lowered.startswith("0x") else "0x" + lowered


def quantity(value: Any, field: str) -> int:
    """A JSON-RPC quantity (hex string) or an int (eth-tester) → int."""
    if isinstance(value, bool):
        raise MalformedAnswer(f"{field}: expected a quantity, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value[:2] in ("0x", "0X"):
        try:
            return int(value, 16)
        except ValueError:
            pass
    raise MalformedAnswer(f"{field}: expected a quantity, got {value!r}")


def _opt_quantity(value: Any, field: str) -> int | None:
    return None if value is None else quantity(value, field)


def _address(value: Any, field: str) -> str:
    try:
        return norm_address(value)
    except ValueError as exc:
        raise MalformedAnswer(f"{field}: {exc}") from None


def _topic_address(topic: Any) -> str | None:
    """An indexed address topic (32 bytes, 12 leading zero bytes) → lowercase address."""
    if not isinstance(topic, str):
        return None
    t = topic.lower()
    if len(t) != 66 or not t.startswith("0x") or t[2:26] != "0" * 24:
        return None
    return "0x" + t[26:]


def _data_bytes(value: Any) -> str:
    """Hex calldata/log data without 0x, lowercase ('' for empty)."""
    if value is None:
        return ""
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    if isinstance(value, str) and value[:2] in ("0x", "0X"):
        return value[2:].lower()
    raise MalformedAnswer(f"expected hex data, got {str(value)[:40]!r}")


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Transfer:
    """One ERC-20 Transfer log that names the expected contract and recipient."""

    sender: str
    amount: int
    log_index: int | None


def matching_transfers(logs: Sequence[Mapping[str, Any]], contract: str, recipient: str) -> list[Transfer]:
    """Every Transfer(from, to=recipient, value) log emitted by `contract`.

    A log must have exactly 3 topics (an ERC-721 Transfer has 4) and 32 bytes of data;
    removed logs (reorged away) are ignored."""
    found: list[Transfer] = []
    for log in logs:
        if log.get("removed") is True:
            continue
        topics = log.get("topics") or []
        if len(topics) != 3 or str(topics[0]).lower() != TRANSFER_TOPIC:
            continue
        if str(log.get("address", "")).lower() != contract:
            continue
        if _topic_address(topics[2]) != recipient:
            continue
        sender = _topic_address(topics[1])
        data = _data_bytes(log.get("data"))
        if sender is None or len(data) != 64:
            continue
        found.append(Transfer(sender, int(data, 16), _opt_quantity(log.get("logIndex"), "logIndex")))
    return found


def _transfer_logs(logs: Sequence[Mapping[str, Any]]) -> list[tuple[str, str | None]]:
    """(contract, recipient) of every Transfer-shaped log, for explaining a rejection."""
    out: list[tuple[str, str | None]] = []
    for log in logs:
        topics = log.get("topics") or []
        if len(topics) == 3 and str(topics[0]).lower() == TRANSFER_TOPIC:
            out.append((str(log.get("address", "")).lower(), _topic_address(topics[2])))
    return out


def _amount_ok(observed: int, expectation: Expectation) -> bool:
    if expectation.amount_policy == "at_least":
        return observed >= expectation.amount
    return observed == expectation.amount


_NodeCheck = ParamSpec("_NodeCheck")


def _malformed_is_unavailable(check: Callable[_NodeCheck, Verdict]) -> Callable[_NodeCheck, Verdict]:
    """A malformed node answer yields an `unavailable` verdict: the chain could not be
    asked properly, which says nothing about the payer's proof."""

    @functools.wraps(check)
    def guarded(*args: _NodeCheck.args, **kwargs: _NodeCheck.kwargs) -> Verdict:
        try:
            return check(*args, **kwargs)
        except (MalformedAnswer, AttributeError, KeyError, OverflowError, TypeError, ValueError) as exc:
            return Verdict.unavailable(f"malformed node answer: {exc}")

    return guarded


def _paid(
    tx: Mapping[str, Any], receipt: Mapping[str, Any], expectation: Expectation, asset: AssetInfo
) -> Verdict | tuple[int, str]:
    """What the transaction paid the recipient and who paid it (ETH: the value sent;
    a token: its Transfer logs to the recipient), or the refusal."""
    sender = _address(tx["from"], "tx.from")
    recipient = norm_address(expectation.recipient)
    payer = norm_address(expectation.payer) if expectation.payer else None
    if asset.address is None:
        calldata = _data_bytes(tx.get("input", tx.get("data")))
        if calldata:
            return Verdict.rejected(Reason.TOKEN_MISMATCH, "calldata present: not a plain ETH transfer")
        to = tx.get("to")
        if to is None or _address(to, "tx.to") != recipient:
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH, f"ETH sent to {to}, expected {recipient}")
        if payer is not None and sender != payer:
            return Verdict.rejected(Reason.PAYER_MISMATCH, f"sent by {sender}, expected {payer}")
        return quantity(tx["value"], "tx.value"), sender
    logs: Sequence[Mapping[str, Any]] = receipt.get("logs") or []
    contract = asset.address.lower()
    matches = matching_transfers(logs, contract, recipient)
    if not matches:
        seen = _transfer_logs(logs)
        if any(to == recipient for _, to in seen):
            return Verdict.rejected(
                Reason.TOKEN_MISMATCH, f"transfer to the recipient is not from contract {contract}"
            )
        if any(c == contract for c, _ in seen):
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH, f"no {asset.symbol} transfer to {recipient}")
        return Verdict.rejected(Reason.TOKEN_MISMATCH, f"no Transfer log from {contract}")
    if payer is not None and sender != payer:
        # Bound through the log's `from` topic when the sender is e.g. a relayer.
        bound = [m for m in matches if m.sender == payer]
        if not bound:
            return Verdict.rejected(
                Reason.PAYER_MISMATCH, f"neither the sender {sender} nor a Transfer's from is {payer}"
            )
        matches = bound
    senders = {m.sender for m in matches}
    return sum(m.amount for m in matches), senders.pop() if len(senders) == 1 else sender


def _block_time(block: Mapping[str, Any] | None, block_number: int) -> datetime:
    """The mining time of the transaction's block (a missing or mismatched block answer
    is malformed)."""
    if block is None:
        raise MalformedAnswer(f"block {block_number} missing")
    if quantity(block["number"], "block.number") != block_number:
        raise MalformedAnswer("block answer is for another height")
    try:
        return datetime.fromtimestamp(quantity(block["timestamp"], "block.timestamp"), UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise MalformedAnswer(f"block timestamp out of range: {exc}") from exc


def _stale(tx_time: datetime, expectation: Expectation) -> Verdict | None:
    """The freshness window: mined before it opened or after it closed."""
    if expectation.not_before is not None and tx_time < _utc(expectation.not_before):
        return Verdict.rejected(Reason.STALE, f"mined at {tx_time.isoformat()}, before the window opens")
    if expectation.not_after is not None and tx_time > _utc(expectation.not_after):
        return Verdict.rejected(Reason.STALE, f"mined at {tx_time.isoformat()}, after the window closed")
    return None


@_malformed_is_unavailable
def check_payment(
    *,
    tx_hash: str,
    tx: Mapping[str, Any] | None,
    receipt: Mapping[str, Any] | None,
    block: Mapping[str, Any] | None,
    head: int | None,
    chain_id: int,
    expected_chain_id: int,
    expectation: Expectation,
    asset: AssetInfo,
) -> Verdict:
    """Decide whether the transaction `tx_hash` pays `expectation` in `asset` (a
    malformed node answer: `unavailable`, never an exception)."""
    # Network binding first: a node on another chain can say nothing about ours.
    if chain_id != expected_chain_id:
        return Verdict.rejected(
            Reason.CHAIN_MISMATCH,
            f"node is on chain id {chain_id}, {expectation.chain} is {expected_chain_id}",
        )
    if tx is None:
        return Verdict.rejected(Reason.TX_NOT_FOUND, f"no transaction {tx_hash} on {expectation.chain}")
    if str(tx.get("hash", "")).lower() != tx_hash:
        raise MalformedAnswer(f"asked for {tx_hash}, node answered {tx.get('hash')!r}")
    tx_chain = _opt_quantity(tx.get("chainId"), "tx.chainId")
    # Legacy (pre-EIP-155) transactions carry no chain id; the node's chain binds them.
    if tx_chain is not None and tx_chain != expected_chain_id:
        return Verdict.rejected(Reason.CHAIN_MISMATCH, f"transaction signed for chain id {tx_chain}")
    if tx.get("blockNumber") is None or receipt is None:
        return Verdict.pending(f"{tx_hash} is not yet in a block")
    if str(receipt.get("blockHash", "")).lower() != str(tx.get("blockHash", "")).lower():
        # The two answers straddle a reorg: ask again later.
        return Verdict.pending("transaction and receipt name different blocks (reorg in progress)")
    if receipt.get("status") is None:
        raise MalformedAnswer("receipt has no status (pre-Byzantium receipts are not accepted)")
    if quantity(receipt["status"], "receipt.status") != 1:
        return Verdict.rejected(Reason.TX_FAILED, "transaction reverted (receipt status 0)")

    paid = _paid(tx, receipt, expectation, asset)
    if isinstance(paid, Verdict):
        return paid
    observed, observed_payer = paid

    if not _amount_ok(observed, expectation):
        word = "at least " if expectation.amount_policy == "at_least" else ""
        return Verdict.rejected(
            Reason.AMOUNT_MISMATCH, f"paid {observed}, expected {word}{expectation.amount}",
            observed_amount=observed,
        )

    block_number = quantity(tx["blockNumber"], "tx.blockNumber")
    tx_time = _block_time(block, block_number)
    stale = _stale(tx_time, expectation)
    if stale is not None:
        return stale

    if head is None:
        raise MalformedAnswer("no head block number")
    confirmations = head - block_number + 1
    if confirmations < expectation.confirmations:
        return Verdict(
            "pending",
            Reason.NOT_FINAL,
            f"{confirmations} of {expectation.confirmations} confirmations",
            observed,
            observed_payer,
            tx_time,
            tx_hash,
            {"confirmations": confirmations},
        )
    return Verdict(
        "ok", None, "", observed, observed_payer, tx_time, tx_hash,
        {"confirmations": confirmations, "block": block_number},
    )
