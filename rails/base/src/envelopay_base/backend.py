"""What the Base rail needs from a chain, whichever backend answers.

A backend reads (for verification) and submits signed transactions (for paying).
Transport failures raise `ChainUnavailable`; the rail turns them into `unavailable`
verdicts or RailErrors at one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class ChainUnavailable(Exception):
    """The chain could not be asked (transport down, node error, malformed answer)."""


class NodeRefused(ChainUnavailable):
    """The node answered, and refused (a JSON-RPC error object, eth-tester's refusal): a
    transaction it refused was not taken, where one sent without an answer may have been."""


@dataclass(frozen=True, slots=True)
class Reading:
    """Everything `verify.check_payment` needs about one transaction, JSON-RPC shaped."""

    chain_id: int
    head: int
    tx: Mapping[str, Any] | None
    receipt: Mapping[str, Any] | None
    block: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class Fees:
    max_fee_per_gas: int
    max_priority_fee_per_gas: int


class Backend(Protocol):
    async def chain_id(self) -> int: ...

    async def read(self, tx_hash: str) -> Reading: ...

    async def receipt(self, tx_hash: str) -> Mapping[str, Any] | None:
        """The transaction's receipt, None while it is not in a block: what a payer
        waits on, without the block and head that verification reads."""
        ...

    async def nonce(self, address: str) -> int: ...

    async def balance(self, address: str) -> int: ...

    async def call(self, to: str, data: str) -> str:
        """eth_call at the latest block; returns the 0x hex result."""
        ...

    async def estimate_gas(self, tx: Mapping[str, Any]) -> int: ...

    async def fees(self) -> Fees: ...

    async def send_raw(self, raw: bytes) -> str:
        """Submit a signed transaction; return its 0x hash."""
        ...

    async def aclose(self) -> None: ...
