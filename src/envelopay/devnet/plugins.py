"""Dev chains: what a rail distribution offers the devnet and the demo, found by entry point.

A rail distribution that can run a local chain registers an object under the entry point
group ``envelopay.devchains``, named as its rail (``solana``, ``base``), that implements
`DevChain`. The core never imports a rail distribution by name: the devnet starts its
nodes and funds wallets through this contract, and the demo opens in-process chains
through it, as the rails themselves are found under ``envelopay.rails``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from envelopay.errors import ConfigError
from envelopay.rails.registry import discover

__all__ = ["DEVCHAIN_GROUP", "DevChain", "LocalWallet", "LocalWorld", "RunningChain", "dev_chain"]

DEVCHAIN_GROUP = "envelopay.devchains"


@dataclass(frozen=True, slots=True)
class LocalWallet:
    """A wallet made on an in-process chain: its address and its key as the rail's
    ``keypair`` option takes it."""

    address: str
    key: bytes


class RunningChain(Protocol):
    """A chain node the devnet started: its JSON-RPC URL, what the devnet's state file
    records of it beyond the URL, and how to stop it."""

    @property
    def url(self) -> str: ...

    @property
    def facts(self) -> Mapping[str, Any]: ...

    async def stop(self) -> None: ...


class LocalWorld(Protocol):
    """An in-process chain (no node, no socket), for the demo and tests."""

    @property
    def chain(self) -> str: ...

    def new_wallet(self, *, native: int = 0, usdc: int = 0) -> LocalWallet: ...

    def fund(self, address: str, *, native: int = 0, usdc: int = 0) -> None: ...

    def usdc_balance(self, address: str) -> int | None:
        """The wallet's local USDC in smallest units; None when it has no token account."""
        ...

    def rail_options(self, key: bytes | None = None) -> dict[str, Any]:
        """The rail factory's options for this chain, paying from `key` when given."""
        ...


@runtime_checkable
class DevChain(Protocol):
    async def start(self, options: Mapping[str, Any]) -> RunningChain:
        """Serve a local chain over JSON-RPC on loopback. Options: ``port`` (0: a free
        one) and the chain's own timing options (see each distribution)."""
        ...

    async def fund(self, rpc_url: str, wallet: str, *, native: int, usdc: int) -> None:
        """The faucet of a node this contract started: `native` smallest units of the
        chain's coin and `usdc` of its local USDC. TransportError when the node refuses."""
        ...

    def local(self) -> LocalWorld: ...


def dev_chain(name: str) -> DevChain:
    """The dev chain registered as `name`; ConfigError when no distribution offers one."""
    plugins = discover(DEVCHAIN_GROUP)
    if name not in plugins:
        installed = sorted(plugins) or "none"
        raise ConfigError(f"no dev chain named {name!r} is installed (installed: {installed})")
    found = plugins[name].load_object()
    if not isinstance(found, DevChain):
        raise ConfigError(f"dev chain {name!r}: entry point {plugins[name].value!r} is not a DevChain")
    return found
