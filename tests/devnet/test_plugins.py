"""Dev chains and custodial payers are plugins found by entry point, as rails are: the core
names no rail distribution, and a name nobody registered is a ConfigError."""

from __future__ import annotations

import pytest

from envelopay.devnet.plugins import DEVCHAIN_GROUP, DevChain, dev_chain
from envelopay.enforcer.spend.payers import PAYER_GROUP, payer_for
from envelopay.errors import ConfigError
from envelopay.rails.registry import discover, make


@pytest.mark.parametrize("group", [DEVCHAIN_GROUP, PAYER_GROUP])
def test_each_installed_rail_registers_its_dev_chain_and_payer(group: str) -> None:
    found = discover(group)
    assert set(found) == set(discover()) == {"solana", "base"}
    assert {p.distribution for p in found.values()} == {"envelopay-solana", "envelopay-base"}


def test_an_unregistered_dev_chain_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no dev chain named 'mars'"):
        dev_chain("mars")


@pytest.mark.parametrize(("name", "native"), [("solana", 10**9), ("base", 10**18)])
def test_a_local_world_makes_funded_wallets_a_rail_pays_from(name: str, native: int) -> None:
    plugin = dev_chain(name)
    assert isinstance(plugin, DevChain)
    world = plugin.local()
    wallet = world.new_wallet(native=native, usdc=5_000_000)
    assert world.usdc_balance(wallet.address) == 5_000_000
    world.fund(wallet.address, usdc=1_000_000)
    assert world.usdc_balance(wallet.address) == 6_000_000
    rail = make(name, world.rail_options(wallet.key))
    assert world.chain in rail.chains
    payer = payer_for(rail)  # the distribution's custodial payer, by the rail's entry point name
    assert payer.chain == world.chain and payer.valid_address(wallet.address)


def test_a_rail_without_a_registered_payer_is_a_config_error() -> None:
    class Stray:
        name = "stray"

    with pytest.raises(ConfigError, match="'stray' offers no custodial payer"):
        payer_for(Stray())
