"""Building the spend enforcer's custodial payers from configuration.

`--pay-rail CHAIN[=RPC_URL]`: the installed rail serving CHAIN (envelopay.rails.registry),
over JSON-RPC when a URL is given (else the rail's local backend: an in-process chain,
for demos), wrapped by the custodial payer its distribution offers as
`<package>.custody.make_payer(rail)` (envelopay.rails.custodial).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from envelopay.errors import ConfigError
from envelopay.rails.custodial import CustodialPayer
from envelopay.rails.registry import rail_for_chain

__all__ = ["make_payers", "payer_for"]


def payer_for(rail: object) -> CustodialPayer:
    package = type(rail).__module__.split(".", 1)[0]
    try:
        module = importlib.import_module(f"{package}.custody")
    except ImportError:
        raise ConfigError(f"rail {getattr(rail, 'name', package)!r} offers no custodial payer") from None
    payer = module.make_payer(rail)
    if not isinstance(payer, CustodialPayer):
        raise ConfigError(f"{package}.custody.make_payer did not return a custodial payer")
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
