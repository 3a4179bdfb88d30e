"""Rail discovery, the rail factory convention, and asset-registry helpers.

Rails are plugins: each distribution declares, under the entry point group
``envelopay.rails``, a factory::

    make_rail(options: Mapping[str, Any]) -> Rail

The factory convention (every rail follows it, so configuration is uniform):

``backend``      ``"local"`` (an in-process chain: LiteSVM, eth-tester) or ``"rpc"``
                 (JSON-RPC over HTTP). Default: ``"rpc"`` when ``rpc_url`` is given,
                 else ``"local"``.
``network``      which network the instance is bound to: ``"mainnet"``, the public test
                 network (``"devnet"`` for Solana, ``"sepolia"`` for Base) or ``"local"``.
                 Default: ``"local"`` for the local backend, ``"mainnet"`` for rpc.
                 An instance verifies only its own network's chain (``rail.chains``);
                 any other chain is ``chain_mismatch``.
``rpc_url``      the JSON-RPC endpoint (rpc backend).
``keypair``      the paying key: a path (str / PathLike) to the rail's key file, or the
                 raw key bytes. Only ``pay()`` needs it.
``local_chain``  for the local backend: a shared in-process chain object (e.g.
                 ``envelopay_solana.local.LocalSolana``). Pass the same object to the
                 payer's and the verifier's rail so both see one chain (the demo and the
                 worker run buyer and seller in one process). Omitted → a fresh chain.
``assets``       overrides of the asset registry:
                 ``{chain: {symbol: {"address": str | None, "decimals": int}}}``.
``http_client``  an ``httpx.AsyncClient`` to share (rpc backend); else the rail makes one.
``clock``        a ``() -> datetime`` (aware, UTC) used where logic needs "now".

Unknown options are ignored, so one configuration can feed several rails.

Chain names follow ``<rail>`` for mainnet and ``<rail>-<network>`` otherwise
("solana", "solana-devnet", "solana-local", "base", "base-sepolia", "base-local"),
so a chain name alone says which rail and network serve it (:func:`chain_network`).
Configuration for several rails is a mapping from entry point name to options,
``{"solana": {...}, "base": {...}}``; see :func:`load_rails`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Literal, cast

from envelopay.errors import ConfigError
from envelopay.rails.interface import ENTRY_POINT_GROUP, AddressSyntax, AssetInfo, Rail

RailFactory = Callable[[Mapping[str, Any]], Rail]


@dataclass(frozen=True, slots=True)
class RailPlugin:
    """An installed plugin: its entry point name and where its object lives. The group is
    ``envelopay.rails`` for rails; a rail distribution's other offers (its custodial
    payer, ``envelopay.payers``; its dev chain, ``envelopay.devchains``) are found the
    same way, under their own groups."""

    name: str
    value: str
    distribution: str | None
    group: str = ENTRY_POINT_GROUP

    def load_object(self) -> object:
        """Import the plugin's module and return the object the entry point names."""
        loaded: object = EntryPoint(name=self.name, value=self.value, group=self.group).load()
        return loaded

    def load(self) -> RailFactory:
        factory = self.load_object()
        if not callable(factory):
            raise ConfigError(f"rail {self.name!r}: entry point {self.value!r} is not callable")
        return cast(RailFactory, factory)


def discover(group: str = ENTRY_POINT_GROUP) -> dict[str, RailPlugin]:
    """The installed plugins of `group` (default: the rails), by entry point name (no
    plugin module is imported)."""
    found: dict[str, RailPlugin] = {}
    for ep in entry_points(group=group):
        dist = ep.dist.name if ep.dist is not None else None
        found.setdefault(ep.name, RailPlugin(ep.name, ep.value, dist, group))
    return found


def make(name: str, options: Mapping[str, Any] | None = None) -> Rail:
    """Build one rail by entry point name with the factory convention's options."""
    plugins = discover()
    if name not in plugins:
        raise ConfigError(f"no rail named {name!r} is installed (installed: {sorted(plugins) or 'none'})")
    rail = plugins[name].load()(dict(options or {}))
    if not isinstance(rail, Rail):
        raise ConfigError(f"rail {name!r}: factory returned {type(rail).__name__}, not a Rail")
    return rail


def load_rails(config: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Rail]:
    """Instantiate rails and index them by the chains they serve.

    ``config`` maps entry point names to factory options. ``None`` loads every
    installed rail with default options (local backends). A rail named in ``config``
    but not installed is a ConfigError; two rails claiming one chain is a ConfigError.
    """
    names: Iterable[str] = discover().keys() if config is None else config.keys()
    by_chain: dict[str, Rail] = {}
    for name in names:
        rail = make(name, (config or {}).get(name, {}))
        for chain in rail.chains:
            if chain in by_chain:
                raise ConfigError(f"chain {chain!r} is served by both {by_chain[chain].name!r} and {name!r}")
            by_chain[chain] = rail
    return by_chain


def rail_for(chain: str, rails: Mapping[str, Rail] | None = None) -> Rail | None:
    """The rail serving ``chain`` among ``rails`` (default: all installed, default options)."""
    table = load_rails() if rails is None else rails
    return table.get(chain)


def chain_network(chain: str) -> tuple[str, str]:
    """("solana-devnet") → ("solana", "devnet"); ("base") → ("base", "mainnet")."""
    rail, sep, network = chain.strip().lower().partition("-")
    if not rail or (sep and not network):
        raise ValueError(f"not a chain name: {chain!r}")
    return rail, network or "mainnet"


def rail_for_chain(chain: str, options: Mapping[str, Any] | None = None) -> Rail:
    """Build the installed rail serving ``chain`` (network from the chain name) with
    the given factory options. ConfigError when no installed rail serves it."""
    try:
        name, network = chain_network(chain)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    rail = make(name, {**(options or {}), "network": network})
    if chain.strip().lower() not in rail.chains:
        served = ", ".join(rail.chains)
        raise ConfigError(f"rail {name!r} does not serve chain {chain!r} (it serves {served})")
    return rail


# -- asset registry helpers (rails keep their registries as data; these are shared)

AssetOverrides = Mapping[str, Mapping[str, Mapping[str, Any]]]


def merge_assets(base: Iterable[AssetInfo], overrides: AssetOverrides | None) -> tuple[AssetInfo, ...]:
    """A rail's built-in registry with configuration overrides applied.

    Overrides replace an entry with the same (chain, symbol), or add one. A bad
    override (missing decimals, negative decimals) is a ConfigError, raised at start.
    """
    table: dict[tuple[str, str], AssetInfo] = {(a.chain, a.symbol.upper()): a for a in base}
    for chain, per_symbol in (overrides or {}).items():
        for symbol, spec in per_symbol.items():
            try:
                decimals = int(spec["decimals"])
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"asset override {chain}/{symbol}: needs integer 'decimals'") from exc
            if decimals < 0 or decimals > 36:
                raise ConfigError(f"asset override {chain}/{symbol}: decimals out of range")
            address = spec.get("address")
            if address is not None and not isinstance(address, str):
                raise ConfigError(f"asset override {chain}/{symbol}: 'address' must be a string or null")
            previous = table.get((chain, symbol.upper()))
            program = spec.get("program", previous.program if previous else None)
            if program is not None and not isinstance(program, str):
                raise ConfigError(f"asset override {chain}/{symbol}: 'program' must be a string or null")
            table[(chain, symbol.upper())] = AssetInfo(chain, symbol.upper(), address, decimals, program)
    return tuple(table.values())


def find_asset(
    assets: Iterable[AssetInfo],
    chain: str,
    token: str,
    *,
    normalize: Callable[[str], str] = lambda s: s,
) -> AssetInfo | None:
    """Resolve ``token`` (a symbol, any case, or an address) on ``chain``.

    ``normalize`` canonicalises addresses (e.g. lower-case for EVM hex); symbols are
    compared case-insensitively. Returns None for an unknown token.
    """
    on_chain = [a for a in assets if a.chain == chain]
    for a in on_chain:
        if a.symbol.upper() == token.upper():
            return a
    try:
        wanted = normalize(token)
    except ValueError:
        return None
    for a in on_chain:
        if a.address is not None and normalize(a.address) == wanted:
            return a
    return None


def to_smallest_unit(amount: str, decimals: int) -> int:
    """Convert a decimal string ("1.5") to smallest units (1500000 for 6 decimals).

    Raises ValueError for malformed amounts or more fractional digits than the asset has.
    """
    match = _DECIMAL.fullmatch(amount.strip())
    if match is None:
        raise ValueError(f"invalid amount {amount!r}")
    whole, frac = match.group(1), match.group(2) or ""
    if not whole and not frac:
        raise ValueError(f"invalid amount {amount!r}")
    if len(frac) > decimals:
        raise ValueError(f"amount {amount!r} has more than {decimals} decimal places")
    scale: int = 10**decimals
    return int(whole or "0") * scale + int(frac.ljust(decimals, "0") or "0")


_DECIMAL = re.compile(r"([0-9]*)(?:\.([0-9]*))?", re.ASCII)


# -- terms judged before anything is sent ------------------------------------------------


@dataclass(frozen=True, slots=True)
class TermsProblem:
    """Why (chain, token, amount, wallet) cannot be paid or asked for: which part, and why."""

    part: Literal["chain", "token", "amount", "wallet"]
    detail: str


def judge_terms(
    rails: Mapping[str, Rail], chain: str, token: str, *, amount: int | None = None, wallet: str | None = None
) -> TermsProblem | None:
    """Whether the configured `rails` can pay or verify `amount` of `token` on `chain` into
    `wallet`: a rail serves the chain, its asset registry knows the token (a symbol or an
    address in the chain's spelling), the amount fits one transfer, and the wallet is an
    address of that chain. None when they can; pure (no I/O)."""
    rail = rails.get(chain)
    if rail is None:
        known = ", ".join(sorted(rails)) or "none"
        return TermsProblem("chain", f"no rail configured for {chain!r} (configured: {known})")
    syntax = rail if isinstance(rail, AddressSyntax) else None

    def spelling(address: str) -> str:
        return syntax.parse_address(chain, address) if syntax is not None else address

    if find_asset(rail.assets(), chain, token, normalize=spelling) is None:
        known = ", ".join(sorted(a.symbol for a in rail.assets() if a.chain == chain)) or "none"
        return TermsProblem("token", f"unknown token {token!r} on {chain} (known: {known})")
    if amount is not None and syntax is not None and amount > syntax.max_amount(chain):
        return TermsProblem("amount", f"{amount} is more than one transfer on {chain} can carry "
                            f"(at most {syntax.max_amount(chain)})")
    if wallet is not None and syntax is not None:
        try:
            spelling(wallet)
        except ValueError as exc:
            return TermsProblem("wallet", f"{wallet[:80]!r} is not an address on {chain}: {exc}")
    return None
