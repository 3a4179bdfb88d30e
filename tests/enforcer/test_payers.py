"""Payers from configuration: the installed rails' custodial payers, by chain."""

from __future__ import annotations

import pytest

from envelopay.enforcer.spend.payers import make_payers, payer_for
from envelopay.errors import ConfigError
from envelopay.rails.custodial import CustodialPayer


def test_pay_rails_build_custodial_payers_by_chain() -> None:
    payers = make_payers(["solana-local", "base-local", "solana-devnet=http://127.0.0.1:9/"])
    assert sorted(payers) == ["base-local", "solana-devnet", "solana-local"]
    assert all(isinstance(p, CustodialPayer) for p in payers.values())
    sol = payers["solana-local"]
    secret = sol.new_secret()
    assert sol.valid_address(sol.address_of(secret)) and sol.asset("usdc") is not None
    with pytest.raises(ValueError):
        sol.address_of(b"short")
    with pytest.raises(ConfigError):
        make_payers(["solana-local", "solana-local"])
    with pytest.raises(ConfigError):
        make_payers(["mars-local"])
    with pytest.raises(ConfigError):
        payer_for(object())
