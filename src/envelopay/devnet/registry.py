"""Agents known to the devnet: their garden addresses, DKIM records and wallets.

`envelopay init --devnet` registers an agent by writing `agents/<address>.json` in the
devnet home (atomically). The devnet's garden accepts mail for every registered
address and authenticates each agent by the SHA-256 of its garden secret recorded there
(`garden_accounts`; the secret stays in the agent's keys/garden.secret), and
`devnet_dns(home)` answers DKIM key lookups from every registered record, so agents
initialised one after another reach each other with no editing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envelopay.errors import ConfigError, UsageError
from envelopay.mail.addresses import require_address
from envelopay.mail.garden_auth import GardenAccount

__all__ = [
    "AgentEntry",
    "agent_entries",
    "devnet_dns",
    "dkim_table",
    "find_agent",
    "garden_accounts",
    "register_agent",
]

AGENTS_DIR = "agents"


@dataclass(frozen=True, slots=True)
class AgentEntry:
    address: str
    addresses: tuple[str, ...]  # every garden address the agent serves (responders too)
    dkim: Mapping[str, str] = field(default_factory=dict)  # "sel._domainkey.domain" → TXT
    wallets: Mapping[str, str] = field(default_factory=dict)  # chain → wallet
    garden_sha256: str | None = None  # of the agent's garden secret; None: it cannot send

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "addresses": list(self.addresses), "dkim": dict(self.dkim),
                "wallets": dict(self.wallets), "garden_sha256": self.garden_sha256}


def agents_dir(home: Path) -> Path:
    return home / AGENTS_DIR


def register_agent(home: Path, entry: AgentEntry) -> Path:
    directory = agents_dir(home)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{entry.address.lower()}.json"
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(entry.to_json(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def _entry(doc: Any) -> AgentEntry | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("address"), str):
        return None
    addresses = doc.get("addresses") or [doc["address"]]
    dkim = doc.get("dkim") or {}
    wallets = doc.get("wallets") or {}
    digest = doc.get("garden_sha256")
    if not (isinstance(addresses, list) and isinstance(dkim, dict) and isinstance(wallets, dict)):
        return None
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        digest = None  # registered before garden credentials: refused until `init --devnet --force`
    return AgentEntry(doc["address"].lower(), tuple(str(a).lower() for a in addresses),
                      {str(k): str(v) for k, v in dkim.items()}, {str(k): str(v) for k, v in wallets.items()},
                      digest)


def agent_entries(home: Path) -> list[AgentEntry]:
    """Every registered agent (files that do not parse are left out, not fatal)."""
    out: list[AgentEntry] = []
    directory = agents_dir(home)
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.json")):
        try:
            entry = _entry(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
        if entry is not None:
            out.append(entry)
    return out


def find_agent(home: Path, address: str) -> AgentEntry:
    for entry in agent_entries(home):
        if entry.address == address.lower() or address.lower() in entry.addresses:
            return entry
    raise ConfigError(f"{address} is not registered with the devnet (run `envelopay init --devnet`)")


def garden_addresses(entries: Sequence[AgentEntry]) -> frozenset[str]:
    return frozenset(a for e in entries for a in e.addresses)


def garden_accounts(entries: Sequence[AgentEntry]) -> list[GardenAccount]:
    """One garden account per registered agent that has a credential: user its address,
    allowed to send as its addresses (its responders' included)."""
    out: list[GardenAccount] = []
    for e in entries:
        if e.garden_sha256 is None:
            continue
        try:
            addrs = frozenset(require_address(a, field="registered address").lower() for a in e.addresses)
        except UsageError:
            continue  # a damaged entry is left out, as one that does not parse
        out.append(GardenAccount(e.address, e.garden_sha256, addrs | {e.address}))
    return out


def dkim_table(home: Path) -> dict[str, str]:
    table: dict[str, str] = {}
    for entry in agent_entries(home):
        table.update({k.rstrip(".").lower(): v for k, v in entry.dkim.items()})
    return table


class _TableFile:
    """The registry's DKIM records, re-read when the agents directory changes."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._stamp: int | None = None
        self._table: dict[str, str] = {}

    def table(self) -> dict[str, str]:
        try:
            stamp = agents_dir(self.home).stat().st_mtime_ns
        except FileNotFoundError:
            return {}
        if stamp != self._stamp:
            self._table, self._stamp = dkim_table(self.home), stamp
        return self._table

    async def __call__(self, name: str) -> str | None:
        return self.table().get(name.rstrip(".").lower())


def devnet_dns(home: Path) -> Any:
    """A DnsLookup (see envelopay.dkim) over every agent registered with the devnet."""
    return _TableFile(home)
