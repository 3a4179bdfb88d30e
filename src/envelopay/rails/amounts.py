"""Amounts as a person reads them: smallest units turned into the asset's own decimal
number from the asset registry (`AssetInfo.decimals`).

The protocol's JSON carries smallest-unit strings ("250000"); wherever a person reads an
amount — a subject, a note, a CLI table or summary — it is written `0.25 USDC`, with the
raw units beside it where a person may need them (`0.25 USDC (250000 units)`). One
formatting function for the whole tool: `human_amount`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from envelopay.rails.interface import AssetInfo, Rail

__all__ = [
    "Decimals",
    "amount_text",
    "amount_with_units",
    "asset_decimals",
    "decimals_in",
    "human_amount",
    "no_decimals",
]

# (chain, token) -> the asset's decimals, None when the registry does not know it.
Decimals = Callable[[str, str], int | None]


def human_amount(units: int, decimals: int) -> str:
    """Smallest units as the asset's decimal number: 250000 with 6 decimals is "0.25",
    1000000000 with 9 is "1"; trailing zeros of the fraction are dropped, never digits."""
    if decimals <= 0:
        return str(units)
    sign, digits = ("-", str(-units)) if units < 0 else ("", str(units))
    digits = digits.rjust(decimals + 1, "0")
    whole, frac = digits[:-decimals], digits[-decimals:].rstrip("0")
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def amount_text(units: int, token: str, decimals: int | None) -> str:
    """`0.25 USDC`; with the decimals unknown the units stay as they are and say so
    (`250000 base units of USDC`), so a person never reads smallest units as whole ones."""
    if decimals is None:
        return f"{units} base units of {token}"
    return f"{human_amount(units, decimals)} {token}"


def amount_with_units(units: int, token: str, decimals: int | None) -> str:
    """`0.25 USDC (250000 units)`: the readable amount and the raw figure the JSON
    holds, for tables a person checks against a chain explorer or a message."""
    if decimals is None:
        return amount_text(units, token, None)
    return f"{amount_text(units, token, decimals)} ({units} units)"


def no_decimals(chain: str, token: str) -> int | None:
    """The lookup when no registry is at hand: every asset's decimals unknown."""
    return None


def decimals_in(assets: Iterable[AssetInfo]) -> Decimals:
    """The lookup over an asset registry: a token is matched on its chain by symbol, in
    any case, or by its exact address."""
    table = tuple(assets)

    def decimals(chain: str, token: str) -> int | None:
        for asset in table:
            if asset.chain == chain and (asset.symbol.upper() == token.upper() or asset.address == token):
                return asset.decimals
        return None

    return decimals


def asset_decimals(rails: Mapping[str, Rail]) -> Decimals:
    """The lookup over the registries of `rails` (a chain -> its rail), each asked only
    for its own chain."""

    def decimals(chain: str, token: str) -> int | None:
        rail = rails.get(chain)
        return None if rail is None else decimals_in(rail.assets())(chain, token)

    return decimals
