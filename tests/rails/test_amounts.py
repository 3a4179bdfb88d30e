"""The one formatting of amounts for people (envelopay.rails.amounts): smallest units as
the asset's decimal number, the inverse of the registry's `to_smallest_unit`."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envelopay.rails.amounts import amount_text, amount_with_units, asset_decimals, decimals_in, human_amount
from envelopay.rails.interface import AssetInfo
from envelopay.rails.registry import to_smallest_unit


@pytest.mark.parametrize(
    ("units", "decimals", "text"),
    [
        (250_000, 6, "0.25"),
        (30_000_000, 6, "30"),
        (1, 6, "0.000001"),
        (1_000_000_000, 9, "1"),
        (1_500_000_001, 9, "1.500000001"),
        (0, 6, "0"),
        (0, 0, "0"),
        (42, 0, "42"),
        (-250_000, 6, "-0.25"),
        (10**30, 18, "1000000000000"),
    ],
)
def test_human_amount(units: int, decimals: int, text: str) -> None:
    assert human_amount(units, decimals) == text


@given(st.integers(min_value=0, max_value=2**256 - 1), st.integers(min_value=0, max_value=36))
def test_human_amount_is_what_to_smallest_unit_reads_back(units: int, decimals: int) -> None:
    assert to_smallest_unit(human_amount(units, decimals), decimals) == units


def test_amount_texts_say_the_units_when_the_decimals_are_unknown() -> None:
    assert amount_text(250_000, "USDC", 6) == "0.25 USDC"
    assert amount_with_units(250_000, "USDC", 6) == "0.25 USDC (250000 units)"
    assert amount_text(250_000, "USDC", None) == "250000 base units of USDC"
    assert amount_with_units(250_000, "USDC", None) == "250000 base units of USDC"


class _Rail:
    def assets(self) -> tuple[AssetInfo, ...]:
        return (AssetInfo("base-local", "USDC", "0xUsdc", 6), AssetInfo("base", "USDC", "0xMain", 7))


def test_lookups_by_symbol_or_address_on_the_chain_asked() -> None:
    table = decimals_in(_Rail().assets())
    assert (table("base-local", "usdc"), table("base-local", "0xUsdc"), table("base", "USDC")) == (6, 6, 7)
    assert table("base-local", "0xMain") is None  # another chain's address
    by_chain = asset_decimals({"base-local": _Rail()})  # type: ignore[dict-item]
    assert by_chain("base-local", "USDC") == 6 and by_chain("solana", "USDC") is None
