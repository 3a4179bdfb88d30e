"""Building the spend enforcer's custodial payers from configuration.

`--pay-rail CHAIN[=RPC_URL]`: the installed rail serving CHAIN (envelopay.rails.registry),
over JSON-RPC when a URL is given (else the rail's local backend: an in-process chain,
for demos), wrapped by the custodial payer its distribution offers: a factory
`make_payer(rail) -> CustodialPayer` (envelopay.rails.custodial) registered under the entry
point group `envelopay.payers`, named as the rail's own entry point (`solana`, `base`).
"""

from __future__ import annotations

from collections.abc import Iterable

from envelopay.errors import ConfigError
from envelopay.rails.custodial import CustodialPayer
from envelopay.rails.registry import discover, rail_for_chain

__all__ = ["PAYER_GROUP", "make_payers", "payer_for"]

PAYER_GROUP = "envelopay.payers"


def payer_for(rail: object) -> CustodialPayer:
    name = getattr(rail, "name", None)
    plugin = discover(PAYER_GROUP).get(name) if isinstance(name, str) else None
    if plugin is None:
        raise ConfigError(f"rail {name or type(rail).__name__!r} offers no custodial payer")
    factory = plugin.load_object()
    payer = factory(rail) if callable(factory) else None
    if not isinstance(payer, CustodialPayer):
        raise ConfigError(f"{plugin.value} did not return a custodial payer")
    return payer


def make_payers(specs: Iterable[str]) -> dict[str, CustodialPayer]:
    out: dict[str, CustodialPayer] = {}
    for spec in specs:
        chain, _, url = spec.partition("=")
        chain = chain.strip().lower()
        if not chain:
            raise ConfigError(f"--pay-rail {spec!r}: expected CHAIN[=RPC_URL]")
        options = {"rpc_url": url.strip(), "backend": "rpc"} if url.strip() else {"backend": "local"}
        payer = payer_for(rail_for_chain(chain, options))
        if chain in out:
            raise ConfigError(f"--pay-rail {chain} given twice")
        out[payer.chain] = payer
    return out
