"""Rail discovery through entry points, the factory convention and asset helpers."""

from __future__ import annotations

from typing import Any

import pytest

from envelopay.errors import ConfigError
from envelopay.rails import registry
from envelopay.rails.interface import ENTRY_POINT_GROUP, AssetInfo, Rail, Reason, Verdict
from envelopay.rails.registry import (
    chain_network,
    discover,
    find_asset,
    load_rails,
    make,
    merge_assets,
    rail_for,
    rail_for_chain,
    to_smallest_unit,
)


def test_installed_rails_are_discovered_without_importing_them() -> None:
    found = discover()
    assert found["solana"].value == "envelopay_solana.rail:make_rail"
    assert found["solana"].distribution == "envelopay-solana"
    assert "base" in found
    assert ENTRY_POINT_GROUP == "envelopay.rails"


def test_make_builds_a_rail_bound_to_one_chain() -> None:
    rail = make("solana", {})
    assert isinstance(rail, Rail)
    assert rail.chains == ("solana-local",)
    rpc = make("solana", {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/", "network": "devnet"})
    assert rpc.chains == ("solana-devnet",)


def test_unknown_rail_and_bad_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="no rail named 'nope'"):
        make("nope")
    with pytest.raises(ConfigError, match="backend"):
        make("solana", {"backend": "carrier-pigeon"})
    with pytest.raises(ConfigError, match="network"):
        make("solana", {"network": "moon"})
    with pytest.raises(ConfigError, match="rpc_url"):
        make("solana", {"backend": "rpc", "rpc_url": "ftp://x"})
    with pytest.raises(ConfigError, match="keypair"):
        make("solana", {"keypair": b"short"})


def test_load_rails_indexes_by_chain_and_refuses_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    rails = load_rails({"solana": {"network": "local"}})
    assert list(rails) == ["solana-local"]
    assert rail_for("solana-local", rails) is rails["solana-local"]
    assert rail_for("solana", rails) is None

    real = registry.discover()
    twin = registry.RailPlugin("solana-twin", real["solana"].value, "envelopay-solana")
    monkeypatch.setattr(registry, "discover", lambda: {**real, "solana-twin": twin})
    with pytest.raises(ConfigError, match="served by both"):
        load_rails({"solana": {}, "solana-twin": {}})


def test_a_factory_returning_a_non_rail_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    plugin = registry.RailPlugin("odd", "builtins:dict", None)
    monkeypatch.setattr(registry, "discover", lambda: {"odd": plugin})
    with pytest.raises(ConfigError, match="not a Rail"):
        make("odd", {})


def test_chain_names_carry_rail_and_network() -> None:
    assert chain_network("solana") == ("solana", "mainnet")
    assert chain_network("Solana-Devnet") == ("solana", "devnet")
    assert chain_network("base-sepolia") == ("base", "sepolia")
    with pytest.raises(ValueError):
        chain_network("solana-")
    with pytest.raises(ValueError):
        chain_network("")
    assert rail_for_chain("solana-devnet", {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/"}).chains == (
        "solana-devnet",)
    with pytest.raises(ConfigError):
        rail_for_chain("dogecoin", {})
    with pytest.raises(ConfigError):
        rail_for_chain("solana-marsnet", {"backend": "rpc", "rpc_url": "http://127.0.0.1:9/"})


ASSETS = (
    AssetInfo("solana", "SOL", None, 9),
    AssetInfo("solana", "USDC", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", 6, "Tokenkeg"),
    AssetInfo("base", "USDC", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", 6),
)


def test_find_asset_by_symbol_or_address() -> None:
    assert find_asset(ASSETS, "solana", "usdc") == ASSETS[1]
    assert find_asset(ASSETS, "solana", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v") == ASSETS[1]
    # base58 is case-sensitive: a re-cased mint is another address
    assert find_asset(ASSETS, "solana", "epjfwdd5aufqssqem2qn1xzybapc8g4wegGkzwytdt1v") is None
    evm = "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913"
    assert find_asset(ASSETS, "base", evm, normalize=str.lower) == ASSETS[2]
    assert find_asset(ASSETS, "base", "SOL") is None
    assert find_asset(ASSETS, "solana", "NOPE") is None


def test_asset_overrides_replace_add_and_validate() -> None:
    merged = merge_assets(ASSETS, {"solana": {"usdc": {"address": "Mint111", "decimals": 2}},
                                   "solana-local": {"EURC": {"address": "E", "decimals": 6}}})
    usdc = find_asset(merged, "solana", "USDC")
    assert usdc is not None and (usdc.address, usdc.decimals, usdc.program) == ("Mint111", 2, "Tokenkeg")
    assert find_asset(merged, "solana-local", "eurc") is not None
    bad: list[dict[str, Any]] = [{"address": "x"}, {"address": "x", "decimals": -1},
                                 {"address": 5, "decimals": 6}, {"address": "x", "decimals": "six"}]
    for spec in bad:
        with pytest.raises(ConfigError):
            merge_assets(ASSETS, {"solana": {"USDC": spec}})


def test_solana_rail_applies_asset_overrides_from_options() -> None:
    wsol = "So11111111111111111111111111111111111111112"
    rail = make("solana", {"assets": {"solana-local": {"USDC": {"address": wsol, "decimals": 9}}}})
    usdc = find_asset(rail.assets(), "solana-local", "USDC")
    assert usdc is not None and usdc.decimals == 9


@pytest.mark.parametrize(("text", "decimals", "units"), [
    ("1", 6, 1_000_000), ("1.5", 6, 1_500_000), ("0.000001", 6, 1), (".25", 2, 25), ("7.", 0, 7),
    ("12", 0, 12)])
def test_to_smallest_unit(text: str, decimals: int, units: int) -> None:
    assert to_smallest_unit(text, decimals) == units


@pytest.mark.parametrize("text", ["", ".", "-1", "+1", "1e3", "1.0000001", "1,5", "\u0661", " "])
def test_to_smallest_unit_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        to_smallest_unit(text, 6)


def test_every_reason_maps_to_an_oops_code_in_one_table() -> None:
    from envelopay.rails.interface import REASON_TO_OOPS

    assert set(REASON_TO_OOPS) == set(Reason)
    assert Verdict.rejected(Reason.STALE).to_json()["oops"] == "stale_proof"
    assert Verdict.unavailable("x").to_json()["oops"] == "rail_unavailable"
    assert Verdict.pending().to_json()["oops"] == "not_final"


def test_the_local_backend_serves_only_the_local_network() -> None:
    with pytest.raises(ConfigError, match="local"):
        make("solana", {"backend": "local", "network": "mainnet"})
