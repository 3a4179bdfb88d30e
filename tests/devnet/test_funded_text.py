"""What `init --devnet` and `fund` print of a funded wallet (seen on a new-user walk: `1000000000
native units, 100000000 USDC units`, while README says 1 SOL, 1 ETH, 100 USDC): the coins in
their own units, the smallest units beside them (issue 30 item 3)."""

from __future__ import annotations

from envelopay.devnet.fund import Funded, funded_text


def test_a_funded_wallet_reads_in_sol_eth_and_usdc() -> None:
    sol = Funded(chain="solana-local", wallet="W1", native=1_000_000_000, usdc=100_000_000)
    assert funded_text(sol) == "solana-local W1: +1 SOL (1000000000 units), +100 USDC (100000000 units)"
    eth = Funded(chain="base-local", wallet="0xW2", native=10**16, usdc=0)
    assert funded_text(eth) == f"base-local 0xW2: +0.01 ETH ({10**16} units), +0 USDC (0 units)"
