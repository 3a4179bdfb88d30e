"""Pure verification of a Solana transaction against an Expectation.

Input is the `result` of `getTransaction` with `encoding: jsonParsed` (the RPC
backend gets it from a node; the LiteSVM backend builds the same shape from the
transactions it executed). No I/O here; both backends call `check_transaction`.

Check table (SOL | SPL token):
  1. reached the expected commitment            (else pending)
  2. meta.err is null                            (tx_failed)
  3. blockTime inside [not_before, not_after]    (stale)
  4. transfers: System `transfer` (lamports) | Token / Token-2022 `transfer`,
     `transferChecked` (and `transferCheckedWithFee`, less its fee); top-level and
     inner instructions alike
  5. asset: native | the token account's mint equals the asset's mint (token_mismatch)
  6. recipient: destination == wallet | destination is the wallet's associated token
     account for (mint, token program), or a token account owned by the wallet
     (recipient_mismatch)
  7. payer binding: source | transfer authority equals expectation.payer (payer_mismatch)
  8. amount: sum of the matching transfers, exact or at_least (amount_mismatch).
     Token-2022 transfer fees: a destination is credited at most its balance increase.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from envelopay.rails.interface import AssetInfo, Expectation, Reason, Verdict
from envelopay_solana.assets import SYSTEM_PROGRAM, TOKEN_PROGRAMS

COMMITMENT_RANK = {"processed": 0, "confirmed": 1, "finalized": 2}


@dataclass(frozen=True, slots=True)
class Transfer:
    """One value movement found in the transaction, native or token."""

    program: str
    source: str
    destination: str
    amount: int
    authority: str | None
    mint: str | None  # None for SOL; for a token transfer without a mint field, from balances


@lru_cache(maxsize=65536)
def associated_token_address(wallet: str, mint: str, token_program: str) -> str | None:
    """The wallet's ATA for (mint, token program), or None for malformed inputs."""
    from solders.pubkey import Pubkey

    from envelopay_solana.assets import ATA_PROGRAM

    try:
        seeds = [bytes(Pubkey.from_string(wallet)), bytes(Pubkey.from_string(token_program)),
                 bytes(Pubkey.from_string(mint))]
    except ValueError:
        return None
    address, _bump = Pubkey.find_program_address(seeds, Pubkey.from_string(ATA_PROGRAM))
    return str(address)


def _account_keys(tx: Mapping[str, Any]) -> list[str]:
    keys = tx.get("transaction", {}).get("message", {}).get("accountKeys", [])
    return [k["pubkey"] if isinstance(k, Mapping) else str(k) for k in keys]


def _token_accounts(meta: Mapping[str, Any], keys: Sequence[str]) -> dict[str, dict[str, Any]]:
    """address → {mint, owner, pre, post} from pre/postTokenBalances."""
    out: dict[str, dict[str, Any]] = {}
    for field, slot in (("preTokenBalances", "pre"), ("postTokenBalances", "post")):
        for bal in meta.get(field) or []:
            idx = bal.get("accountIndex")
            if not isinstance(idx, int) or not 0 <= idx < len(keys):
                continue
            entry = out.setdefault(keys[idx], {"mint": None, "owner": None, "pre": 0, "post": 0})
            entry["mint"] = bal.get("mint") or entry["mint"]
            entry["owner"] = bal.get("owner") or entry["owner"]
            amount = (bal.get("uiTokenAmount") or {}).get("amount")
            if isinstance(amount, str) and amount.isdigit():
                entry[slot] = int(amount)
    return out


def _instructions(tx: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Top-level and inner instructions, in any order (all of them count)."""
    out: list[Mapping[str, Any]] = list(tx.get("transaction", {}).get("message", {}).get("instructions", []))
    for group in (tx.get("meta") or {}).get("innerInstructions") or []:
        out.extend(group.get("instructions") or [])
    return out


def _as_int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


def extract_transfers(tx: Mapping[str, Any]) -> list[Transfer]:
    """Every SOL and SPL transfer in the transaction (top-level and inner)."""
    keys = _account_keys(tx)
    accounts = _token_accounts(tx.get("meta") or {}, keys)
    transfers: list[Transfer] = []
    for ix in _instructions(tx):
        parsed = ix.get("parsed")
        if not isinstance(parsed, Mapping):
            continue
        program = ix.get("programId")
        kind = parsed.get("type")
        info = parsed.get("info") or {}
        if program == SYSTEM_PROGRAM and kind == "transfer":
            lamports = _as_int(info.get("lamports"))
            if lamports is not None:
                source = str(info.get("source"))
                transfers.append(Transfer(SYSTEM_PROGRAM, source, str(info.get("destination")),
                                          lamports, source, None))
        elif program in TOKEN_PROGRAMS and kind in ("transfer", "transferChecked", "transferCheckedWithFee"):
            if kind == "transfer":
                amount = _as_int(info.get("amount"))
            else:
                amount = _as_int((info.get("tokenAmount") or {}).get("amount"))
            if kind == "transferCheckedWithFee" and amount is not None:
                # Token-2022 transfer-fee extension: the fee is withheld in the destination.
                fee = _as_int((info.get("feeAmount") or {}).get("amount"))
                amount = None if fee is None or fee > amount else amount - fee
            if amount is None:
                continue
            dest = str(info.get("destination"))
            mint = info.get("mint") or accounts.get(dest, {}).get("mint") or accounts.get(
                str(info.get("source")), {}).get("mint")
            authority = info.get("authority") or info.get("multisigAuthority")
            transfers.append(Transfer(str(program), str(info.get("source")), dest, amount,
                                      str(authority) if authority else None, str(mint) if mint else None))
    return transfers


def _block_time(tx: Mapping[str, Any]) -> datetime | None:
    value = tx.get("blockTime")
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None  # an absurd block time is no block time (the window check refuses it)
    return None


def check_transaction(
    tx: Mapping[str, Any],
    expectation: Expectation,
    asset: AssetInfo,
    *,
    signature: str,
    confirmation: str | None,
) -> Verdict:
    """Decide one proof. `confirmation` is the commitment the transaction is known to
    have reached (from the node's answer or getSignatureStatuses).

    The document comes from a node: a shape this code cannot read is the node's fault,
    so it becomes `unavailable` (ask again, or another node), never an exception and
    never a rejection of the payer's proof."""
    try:
        return _check(tx, expectation, asset, signature=signature, confirmation=confirmation)
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
        return Verdict.unavailable(f"node answer has an unexpected shape ({type(exc).__name__})")


def _check(
    tx: Mapping[str, Any],
    expectation: Expectation,
    asset: AssetInfo,
    *,
    signature: str,
    confirmation: str | None,
) -> Verdict:
    wanted = COMMITMENT_RANK.get(expectation.commitment, 1)
    if confirmation is None or COMMITMENT_RANK.get(confirmation, -1) < wanted:
        return Verdict.pending(f"transaction at {confirmation or 'unknown'}, needs {expectation.commitment}")
    sigs = tx.get("transaction", {}).get("signatures") or []
    if signature not in sigs:
        return Verdict.unavailable("node answered with a different transaction")
    meta = tx.get("meta")
    if not isinstance(meta, Mapping):
        return Verdict.unavailable("transaction has no status metadata")
    if meta.get("err") is not None:
        return Verdict.rejected(Reason.TX_FAILED, f"transaction failed: {meta.get('err')}")
    when = _block_time(tx)
    if expectation.not_before is not None or expectation.not_after is not None:
        if when is None:
            return Verdict.rejected(Reason.STALE, "transaction has no block time")
        if expectation.not_before is not None and when < expectation.not_before:
            return Verdict.rejected(Reason.STALE, f"block time {when.isoformat()} before the window")
        if expectation.not_after is not None and when > expectation.not_after:
            return Verdict.rejected(Reason.STALE, f"block time {when.isoformat()} after the window")

    transfers = extract_transfers(tx)
    accounts = _token_accounts(meta, _account_keys(tx))
    recipient = expectation.recipient
    if asset.native:
        same_asset = [t for t in transfers if t.program == SYSTEM_PROGRAM]
        matching = [t for t in same_asset if t.destination == recipient]
        to_recipient_other = [
            t for t in transfers if t.program != SYSTEM_PROGRAM and _owned_by(accounts, t, recipient)]
    else:
        same_asset = [t for t in transfers if t.program in TOKEN_PROGRAMS and t.mint == asset.address]
        matching = [t for t in same_asset if _owned_by(accounts, t, recipient)]
        to_recipient_other = [
            t for t in transfers
            if (t.program == SYSTEM_PROGRAM and t.destination == recipient)
            or (t.program in TOKEN_PROGRAMS and t.mint != asset.address and _owned_by(accounts, t, recipient))
        ]
    if not matching:
        if to_recipient_other:
            return Verdict.rejected(Reason.TOKEN_MISMATCH, f"transfer to the recipient is not {asset.symbol}")
        if same_asset:
            return Verdict.rejected(Reason.RECIPIENT_MISMATCH, f"no {asset.symbol} transfer to {recipient}")
        if transfers:
            return Verdict.rejected(Reason.TOKEN_MISMATCH, f"no {asset.symbol} transfer in the transaction")
        return Verdict.rejected(Reason.RECIPIENT_MISMATCH, "the transaction contains no transfer")

    if expectation.payer is not None:
        matching = [t for t in matching if t.authority == expectation.payer]
        if not matching:
            return Verdict.rejected(Reason.PAYER_MISMATCH,
                                    f"no matching transfer authorised by {expectation.payer}")

    observed = _credited(accounts, matching)
    want = expectation.amount
    if expectation.amount_policy == "exact" and observed != want:
        return Verdict.rejected(Reason.AMOUNT_MISMATCH, f"observed {observed}, expected exactly {want}",
                                observed_amount=observed)
    if expectation.amount_policy == "at_least" and observed < want:
        return Verdict.rejected(Reason.AMOUNT_MISMATCH, f"observed {observed}, expected at least {want}",
                                observed_amount=observed)
    authorities = {t.authority for t in matching}
    payer = authorities.pop() if len(authorities) == 1 else None
    ok = Verdict.accepted(observed_amount=observed, payer=payer, tx_time=when, proof_key=signature)
    slot = tx.get("slot")  # where the transaction landed: the evidence folder records it
    return replace(ok, extra={"slot": slot}) if isinstance(slot, int) and not isinstance(slot, bool) else ok


def _owned_by(accounts: Mapping[str, Mapping[str, Any]], t: Transfer, wallet: str) -> bool:
    """Is the token transfer's destination the wallet's token account for its mint?"""
    if t.program == SYSTEM_PROGRAM:
        return False
    owner = accounts.get(t.destination, {}).get("owner")
    if owner is not None:
        return bool(owner == wallet)
    return t.mint is not None and t.destination == associated_token_address(wallet, t.mint, t.program)


def _credited(accounts: Mapping[str, Mapping[str, Any]], matching: Sequence[Transfer]) -> int:
    """Sum of matching transfers; for token accounts, capped per destination by its
    balance increase when the node reports balances (Token-2022 fees withhold part)."""
    per_dest: dict[str, int] = {}
    for t in matching:
        per_dest[t.destination] = per_dest.get(t.destination, 0) + t.amount
    total = 0
    for dest, amount in per_dest.items():
        acct = accounts.get(dest)
        if acct is not None and matching[0].program in TOKEN_PROGRAMS:
            amount = min(amount, max(acct["post"] - acct["pre"], 0))
        total += amount
    return total
