"""`envelopay fund`: the devnet's faucet (it refuses anything but the devnet's own nodes).

A target is an agent address registered with the devnet (its wallets on both chains)
or a bare wallet: base58 → Solana, 0x… → Base. Amounts are whole units as a person
types them ("1", "0.5", "100"): SOL (9 decimals), ETH (18), USDC (6 on both chains).
Funding a wallet with USDC alone also gives it a little native coin for fees
(`FEE_SOL`, `FEE_ETH`), so a funded wallet can pay at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from envelopay.devnet import registry
from envelopay.devnet.plugins import dev_chain
from envelopay.devnet.state import DevnetState, pid_alive
from envelopay.errors import ConfigError, UsageError
from envelopay.rails.amounts import amount_with_units

__all__ = ["FundPlan", "Funded", "fund", "funded_text", "plan_funding", "to_units"]

FEE_SOL = 10_000_000  # 0.01 SOL in lamports
FEE_ETH = 10**16  # 0.01 ETH in wei
_SOLANA = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{32,44}$")
_EVM = re.compile(r"^0x[0-9a-fA-F]{40}$")


def to_units(amount: str | None, decimals: int, what: str) -> int:
    """'1.5' → smallest units; None → 0. UsageError for anything else."""
    if amount is None:
        return 0
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise UsageError(f"--{what}: {amount!r} is not a number") from None
    units = value * (Decimal(10) ** decimals)
    if not value.is_finite() or value < 0 or units != units.to_integral_value():
        raise UsageError(f"--{what}: {amount!r} is not a non-negative amount "
                         f"with at most {decimals} decimals")
    return int(units)


@dataclass(frozen=True, slots=True)
class FundPlan:
    solana_wallet: str | None
    base_wallet: str | None
    lamports: int
    solana_usdc: int
    wei: int
    base_usdc: int


@dataclass(frozen=True, slots=True)
class Funded:
    chain: str
    wallet: str
    native: int
    usdc: int


def funded_text(item: Funded) -> str:
    """What a person reads of one funded wallet: `+1 SOL (1000000000 units), +100 USDC
    (100000000 units)` — the coins as typed (`--sol 1`), the smallest units beside them."""
    coin, places = ("SOL", 9) if item.chain.startswith("solana") else ("ETH", 18)
    return (f"{item.chain} {item.wallet}: +{amount_with_units(item.native, coin, places)}, "
            f"+{amount_with_units(item.usdc, 'USDC', 6)}")


def plan_funding(
    home: Path, target: str, *, sol: str | None, eth: str | None, usdc: str | None, chain: str | None
) -> FundPlan:
    if chain not in (None, "solana", "base"):
        raise UsageError("--chain: solana or base")
    if "@" in target:
        wallets = registry.find_agent(home, target).wallets
        solana, base = wallets.get("solana-local"), wallets.get("base-local")
    elif _SOLANA.match(target):
        solana, base = target, None
    elif _EVM.match(target):
        solana, base = None, target
    else:
        raise UsageError(f"{target!r} is neither a registered agent address nor a Solana or Base wallet")
    if chain == "solana":
        base = None
    elif chain == "base":
        solana = None
    lamports, wei, cents = to_units(sol, 9, "sol"), to_units(eth, 18, "eth"), to_units(usdc, 6, "usdc")
    if sol is not None and solana is None:
        raise UsageError("--sol: the target has no Solana wallet")
    if eth is not None and base is None:
        raise UsageError("--eth: the target has no Base wallet")
    if not (lamports or wei or cents):
        raise UsageError("nothing to fund: give --sol, --eth or --usdc")
    return FundPlan(
        solana, base,
        lamports or (FEE_SOL if cents and solana else 0), cents if solana else 0,
        wei or (FEE_ETH if cents and base else 0), cents if base else 0,
    )


async def fund(state: DevnetState, plan: FundPlan) -> list[Funded]:
    """Carry out `plan` on the devnet's nodes; returns what each wallet received."""
    if not pid_alive(state.pid):
        raise ConfigError("the devnet is not running: `envelopay devnet up` first")  # environment: exit 3
    done: list[Funded] = []
    if plan.solana_wallet and (plan.lamports or plan.solana_usdc):
        await dev_chain("solana").fund(state.solana.rpc_url, plan.solana_wallet,
                                       native=plan.lamports, usdc=plan.solana_usdc)
        done.append(Funded("solana-local", plan.solana_wallet, plan.lamports, plan.solana_usdc))
    if plan.base_wallet and (plan.wei or plan.base_usdc):
        await dev_chain("base").fund(state.base.rpc_url, plan.base_wallet,
                                     native=plan.wei, usdc=plan.base_usdc)
        done.append(Funded("base-local", plan.base_wallet, plan.wei, plan.base_usdc))
    return done
