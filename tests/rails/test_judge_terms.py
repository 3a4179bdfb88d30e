"""rails.registry.judge_terms with the installed rails (local backends): the asset
registry and each rail's address syntax judge a chain, token, amount and wallet before
anything is sent or paid (issue 29, item 13)."""

from __future__ import annotations

import pytest

from envelopay.rails.interface import AddressSyntax
from envelopay.rails.registry import judge_terms, load_rails

SOL = "DR3qiCkUS7JkfoG7NHQ6xZM1HUq1disTsiBqQLTf6VHL"
EVM = "0x46f76b92b2b7d4780a2003E670537280EF903304"


@pytest.fixture(scope="module")
def rails():  # type: ignore[no-untyped-def]
    return load_rails({"solana": {}, "base": {}})


def test_both_rails_know_their_spelling(rails) -> None:  # type: ignore[no-untyped-def]
    sol, base = rails["solana-local"], rails["base-local"]
    assert isinstance(sol, AddressSyntax) and isinstance(base, AddressSyntax)
    assert sol.parse_address("solana-local", SOL) == SOL
    assert base.parse_address("base-local", EVM) == EVM.lower()
    assert (sol.max_amount("solana-local"), base.max_amount("base-local")) == (2**64 - 1, 2**256 - 1)
    for bad in (EVM, "0xzz", "", "x" * 44, "\u0661" * 40):
        with pytest.raises(ValueError):
            sol.parse_address("solana-local", bad)
    for bad in (SOL, "0xzz", "0x" + "g" * 40, "0x" + "a" * 39, ""):
        with pytest.raises(ValueError):
            base.parse_address("base-local", bad)


@pytest.mark.parametrize(("chain", "token", "amount", "wallet", "part"), [
    ("solana-local", "USDC", 5, SOL, None),
    ("base-local", "usdc", 5, EVM, None),
    # the asset's address, in any case
    ("base-local", "0xF2E246BB76DF876Cef8b38ae84130F4F55De395b".lower(), 5, EVM, None),
    ("solana-local", "USDC", 2**64 - 1, None, None),
    ("ethereum", "DAI", 5, EVM, "chain"),
    ("solana-local", "DOGE", 5, SOL, "token"),
    ("solana-local", "USDC", 2**64, SOL, "amount"),
    ("solana-local", "USDC", 5, EVM, "wallet"),
    ("base-local", "USDC", 5, "0xzz", "wallet"),
    ("base-local", "USDC", 5, SOL, "wallet"),
])
def test_judge_terms(rails, chain: str, token: str, amount: int, wallet: str | None,  # type: ignore[no-untyped-def]
                     part: str | None) -> None:
    problem = judge_terms(rails, chain, token, amount=amount, wallet=wallet)
    assert (problem.part if problem else None) == part, problem
