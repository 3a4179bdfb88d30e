"""One look at the installed rails, one proof verified, one payment made: what a front end
does with rails outside a running agent.

Verifying and paying dispatch to whichever installed rail serves the chain (chain names
are `<rail>` or `<rail>-<network>`), always over JSON-RPC: a local chain lives inside the
process that created it, so another process reaches one only through an RPC endpoint.
Bad options are UsageErrors naming the option; a chain no rail serves is a ConfigError;
a payment that did not happen is a RailError (its `sent` set when the transaction left
and may still land: SPEC.md "What a failed `pay()` means"), an unreachable RPC while
verifying a TransportError.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypedDict, TypeVar, Unpack

from envelopay.errors import EnvelopayError, UsageError
from envelopay.rails.interface import Expectation, Rail, Verdict
from envelopay.rails.registry import discover, make, rail_for_chain

__all__ = [
    "ExpectationOptions", "chain_name", "expectation", "installed_rails", "pay_once", "positive_amount",
    "verify_once",
]

T = TypeVar("T")

# An rpc-backend rail never connects when built: the cheap way to read its registry.
_LISTING_OPTIONS = {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/"}
_COMMITMENTS = ("processed", "confirmed", "finalized")


def chain_name(chain: str) -> str:
    return chain.strip().lower()


def positive_amount(value: str) -> int:
    """--amount: digits, above zero, in the asset's smallest unit."""
    text = value.strip()
    if not (text.isascii() and text.isdigit()) or int(text) <= 0:
        raise UsageError(f"--amount must be a positive integer in the asset's smallest unit, not {value!r}")
    return int(text)


def _when(name: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise UsageError(f"--{name}: not an ISO 8601 time ({value!r})") from exc
    if parsed.tzinfo is None:
        raise UsageError(f"--{name}: give a time zone (e.g. 2026-11-30T12:00:00Z)")
    return parsed


def _check_commitment(commitment: str) -> None:
    if commitment not in _COMMITMENTS:
        raise UsageError("--commitment must be processed, confirmed or finalized")


def _require_rpc(rpc: str | None, what: str) -> str:
    if rpc is None:
        raise UsageError(f"--rpc URL (or ENVELOPAY_RPC_URL) is required: the CLI {what} over JSON-RPC")
    return rpc


class ExpectationOptions(TypedDict):
    """The option values `expectation` reads (as the CLI's `rails verify` takes them)."""

    chain: str
    token: str
    amount: str
    to: str
    at_least: bool
    payer: str | None
    commitment: str
    confirmations: int
    not_before: str | None
    not_after: str | None


def expectation(**o: Unpack[ExpectationOptions]) -> Expectation:
    """What a proof must show, from option values."""
    _check_commitment(o["commitment"])
    return Expectation(
        chain=chain_name(o["chain"]), token=o["token"], amount=positive_amount(o["amount"]),
        recipient=o["to"],
        amount_policy="at_least" if o["at_least"] else "exact", payer=o["payer"],
        not_before=_when("not-before", o["not_before"]), not_after=_when("not-after", o["not_after"]),
        commitment=o["commitment"],  # type: ignore[arg-type]  # checked above
        confirmations=o["confirmations"],
    )


def _with_rail(rail: Rail, use: Callable[[Rail], Awaitable[T]]) -> T:
    async def run() -> T:
        try:
            return await use(rail)
        finally:
            await _close(rail)

    return asyncio.run(run())


def verify_once(tx: str, *, rpc: str | None, **options: Unpack[ExpectationOptions]) -> tuple[str, Verdict]:
    """Verify the proof `{"tx": tx}` on the rail serving `chain`; the chain's name and the verdict."""
    _check_commitment(options["commitment"])  # named before a missing --rpc
    url = _require_rpc(rpc, "verifies")
    want = expectation(**options)
    rail = rail_for_chain(options["chain"], {"backend": "rpc", "rpc_url": url})
    return want.chain, _with_rail(rail, lambda r: r.verify({"tx": tx}, want))


def pay_once(
    *, chain: str, token: str, amount: int, to: str, rpc: str | None, keypair: str, wait: bool = True
) -> dict[str, Any]:
    """Pay once; the answer holds the chain, the proof and its replay key."""
    url = _require_rpc(rpc, "pays")
    options: dict[str, Any] = {"backend": "rpc", "rpc_url": url, "keypair": keypair}
    if not wait:
        options["confirm_timeout"] = 0
    rail = rail_for_chain(chain, options)
    normalized = chain_name(chain)
    proof = _with_rail(rail, lambda r: r.pay(chain=normalized, token=token, amount=amount, recipient=to))
    return {"chain": normalized, "proof": proof, "proof_key": rail.proof_key(proof)}


def installed_rails() -> list[dict[str, Any]]:
    """Each installed rail: its distribution and entry point, its chains and assets, or
    why it cannot be loaded."""
    listing: list[dict[str, Any]] = []
    for name, plugin in sorted(discover().items()):
        entry: dict[str, Any] = {
            "rail": name, "distribution": plugin.distribution, "entry_point": plugin.value
        }
        try:
            rail = make(name, _LISTING_OPTIONS)
        except (EnvelopayError, ImportError, TypeError, ValueError) as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
        else:
            assets = rail.assets()
            entry["chains"] = sorted({a.chain for a in assets})
            entry["assets"] = [
                {"chain": a.chain, "symbol": a.symbol, "address": a.address, "decimals": a.decimals}
                | ({"program": a.program} if a.program else {})
                for a in assets
            ]
            asyncio.run(_close(rail))
        listing.append(entry)
    return listing


async def _close(rail: Any) -> None:
    closer = getattr(rail, "aclose", None)
    if closer is not None:
        await closer()
