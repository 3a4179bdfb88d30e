"""`envelopay init`: write a configuration with local defaults and generate its keys.

`init --devnet` writes a configuration for the running devnet instead (envelopay.devnet):
its garden socket and root, its chains over JSON-RPC (`backend = "rpc"`), DKIM keys
looked up in the devnet's table, and registers the agent there (its addresses, DKIM
record and wallets) so agents initialised one after another reach each other with no
editing. It then funds the new wallets from the devnet's faucet (`DEVNET_FUNDS`).

Either way the agent gets its own garden credential (SPEC.md "Walled garden"): a secret
in keys/garden.secret (mode 0600, kept by --force, never printed) whose SHA-256 goes to
the garden that will check it: the agent's own accounts file (garden-accounts.json, read
by `worker serve --garden`), or the devnet's registry.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envelopay.config import WorkerConfig, load_config
from envelopay.devnet.fund import fund as give
from envelopay.devnet.fund import funded_text, plan_funding
from envelopay.devnet.registry import AgentEntry, register_agent
from envelopay.devnet.state import devnet_home, read_state
from envelopay.errors import ConfigError, UsageError
from envelopay.mail.addresses import require_address
from envelopay.mail.garden_auth import Grant, account_with, grant, put_account, secret_hash, write_secret
from envelopay.node.keys import Entropy, GeneratedKeys, evm_address, generate_keys, solana_pubkey

if TYPE_CHECKING:
    from envelopay.devnet.state import DevnetState

__all__ = ["InitResult", "admit_agent", "init_agent", "init_devnet_agent", "render_config"]


@dataclass(frozen=True, slots=True)
class InitResult:
    config: Path
    solana_wallet: str
    base_wallet: str
    dkim_txt: Path
    garden_secret: Path | None = None  # the file; its content is never printed
    responders: tuple[str, ...] = ()  # the addresses `call` reaches (kv-<local part>@…)


GARDEN_SECRET = "keys/garden.secret"
GARDEN_ACCOUNTS = "garden-accounts.json"


# What `init --devnet` gives each new agent from the faucet (whole units).
DEVNET_FUNDS = {"sol": "1", "eth": "1", "usdc": "100"}


def selector_for(address: str) -> str:
    """One selector per agent: several agents of one garden share the domain."""
    return re.sub(r"[^a-z0-9-]", "-", address.split("@")[0].lower()).strip("-") or "ep1"


def render_config(
    *, address: str, domain: str, solana_wallet: str, base_wallet: str, dkim_txt: str = "",
    devnet: DevnetState | None = None,
) -> str:
    """The TOML `init` writes (paths relative to the config file)."""
    selector = selector_for(address)
    text = _render(address=address, domain=domain, solana_wallet=solana_wallet, base_wallet=base_wallet,
                   dkim_txt=dkim_txt, selector=selector)
    return text if devnet is None else _for_devnet(text, devnet, selector, domain)


def _for_devnet(text: str, state: DevnetState, selector: str, domain: str) -> str:
    """The local defaults, pointed at the running devnet."""
    swaps = [
        ('dkim_policy = "prefer"\n',
         f'dkim_policy = "prefer"\ndkim_dns = "devnet"\ndevnet_home = "{state.home}"\n'),
        ('garden_root = "var/garden"\n',
         f'garden_root = "{state.garden_root}"\ngarden_socket = "{state.garden_socket}"\n'),
        # The devnet's garden checks the agent's secret against the registry, not a file.
        (f'garden_accounts = "{GARDEN_ACCOUNTS}"\n', ""),
        ('[rails.solana]\nbackend = "local"\n',
         f'[rails.solana]\nbackend = "rpc"\nnetwork = "local"\nrpc_url = "{state.solana.rpc_url}"\n'),
        ('[rails.base]\nbackend = "local"\n',
         f'[rails.base]\nbackend = "rpc"\nnetwork = "local"\nrpc_url = "{state.base.rpc_url}"\n'
         'poll_interval = 0.1\n'),
        ("# peers' records here. With dkim_dns = \"resolver\" real DNS is used instead.",
         "# peers' records here; the devnet's table (dkim_dns = \"devnet\") has every registered agent's."),
    ]
    for old, new in swaps:
        if old not in text:
            raise ConfigError(f"init --devnet: the template lost {old.strip()!r}")
        text = text.replace(old, new, 1)
    return text + (
        "\n# How long a proof that is not final yet may wait before the OOPS (seconds; see SPEC.md).\n"
        "[wait]\nwindow_solana = 60\nwindow_base = 120\n"
    )


def _render(*, address: str, domain: str, solana_wallet: str, base_wallet: str, dkim_txt: str,
            selector: str) -> str:
    return f'''# envelopay agent configuration (written by `envelopay init`).
# Paths are relative to this file. Keys in keys/ are for the LOCAL chains and garden.

[agent]
address = "{address}"
domain = "{domain}"
ledger = "var/agent.db"
dkim_selector = "{selector}"
dkim_key = "keys/dkim.pem"
dkim_policy = "prefer"

[transport]
kind = "garden"
garden_root = "var/garden"
# This agent's own garden credential (mode 0600; SPEC.md "Walled garden"), and who may
# send into the garden `worker serve --garden` runs: this agent, and whoever
# `envelopay garden account` adds to that file.
garden_secret_file = "{GARDEN_SECRET}"
garden_accounts = "{GARDEN_ACCOUNTS}"

[rails.solana]
backend = "local"
keypair = "keys/solana.json"

[rails.base]
backend = "local"
keypair = "keys/base.key"

[[accept]]
chain = "solana-local"
token = "USDC"
wallet = "{solana_wallet}"

[[accept]]
chain = "base-local"
token = "USDC"
wallet = "{base_wallet}"

# Tasks this agent sells when it runs `envelopay worker serve`. An ORDER names a task
# and supplies its fields; nothing received is ever executed.
[[tasks]]
name = "word_count"
description = "Count the words and characters of a text"
handler = "envelopay.worker.operations:word_count"
schema = "envelopay.worker.operations:WordCount"
price = "250000"

[[tasks]]
name = "digest"
description = "SHA-256 of a text (free)"
handler = "envelopay.worker.operations:digest"
schema = "envelopay.worker.operations:Digest"
price = "0"

# DKIM public keys of the garden (selector._domainkey.domain = TXT record); add your
# peers' records here. With dkim_dns = "resolver" real DNS is used instead.
[dkim_records]
"{selector}._domainkey.{domain}" = "{dkim_txt}"

# A deterministic email-as-tool endpoint inside the garden. Its address is this agent's
# own (kv-<local part>): a garden address belongs to one account, and every agent `init`
# sets up declares one.
[[responders]]
address = "kv-{selector}@{domain}"
description = "key-value lookup"
handler = "envelopay.endpoints.reference:kv_get"
schema = "envelopay.endpoints.reference:KvGet"
'''


def _check_directory(directory: Path) -> None:
    """--dir names a directory, or where one can be made: a file there (or above it) is
    bad input, refused before any key is written (it was a FileExistsError traceback)."""
    for place in (directory, *directory.parents):
        if place.exists():
            if not place.is_dir():
                raise UsageError(f"--dir: {place} is a file, not a directory")
            return


def init_agent(
    directory: Path,
    *,
    address: str,
    force: bool = False,
    entropy: Entropy = secrets.token_bytes,
    devnet: DevnetState | None = None,
) -> InitResult:
    """Create DIRECTORY/envelopay.toml and DIRECTORY/keys/. Refuses to overwrite keys.
    With `devnet`, the config points at it and the agent is registered with it."""
    addr = require_address(address, field="--address").lower()
    domain = addr.rsplit("@", 1)[1]
    _check_directory(directory)
    config = directory / "envelopay.toml"
    keys = directory / "keys"
    have_keys = (keys / "dkim.pem").exists()
    if (config.exists() or have_keys) and not force:
        raise UsageError(f"{config} or its keys already exist (use --force to rewrite the config)")
    directory.mkdir(parents=True, exist_ok=True)
    if have_keys:
        # --force rewrites the config around the existing keys; keys are never overwritten.
        generated = GeneratedKeys(
            keys / "dkim.pem", keys / "dkim.txt",
            keys / "solana.json", solana_pubkey(keys / "solana.json"),
            keys / "base.key", evm_address(keys / "base.key"),
        )
    else:
        generated = generate_keys(keys, entropy=entropy)
    config.write_text(
        render_config(
            address=addr,
            domain=domain,
            solana_wallet=generated.solana_wallet,
            base_wallet=generated.base_wallet,
            dkim_txt=generated.dkim_txt.read_text().strip(),
            devnet=devnet,
        )
    )
    (directory / "var").mkdir(exist_ok=True)
    try:
        cfg = load_config(config)  # what we wrote must load: fail here, not at first use
    except ConfigError as exc:
        raise ConfigError(f"init wrote an invalid config: {exc}") from exc
    secret_path = cfg.path(GARDEN_SECRET)
    secret = write_secret(secret_path)  # kept when it exists (--force), like the keys
    if devnet is not None:
        register_with_devnet(devnet, cfg, generated.dkim_txt.read_text().strip(), secret_hash(secret))
    else:
        put_account(cfg.path(GARDEN_ACCOUNTS), account_with(addr, agent_addresses(cfg), secret))
    return InitResult(config, generated.solana_wallet, generated.base_wallet, generated.dkim_txt, secret_path,
                      tuple(r.address for r in cfg.responders))


def agent_addresses(cfg: WorkerConfig) -> tuple[str, ...]:
    """The addresses an agent's garden account may send as: its own and its responders'."""
    return (cfg.agent.address, *(r.address.lower() for r in cfg.responders))


def admit_agent(accounts: Path, config: Path, *, take: Iterable[str] = ()) -> Grant:
    """Let the agent of `config` send into the garden whose accounts file is `accounts`:
    its account (the hash of its keys/garden.secret, its addresses: its own and its
    responders') is added or replaced. The config is the agent's own word, so an address
    another account holds is refused (AddressTaken) unless `take` names it. Returns what
    was granted; the secret itself never leaves the agent's file."""
    # lazy: keeps cryptography off this module's import
    from envelopay.node.agent_node import garden_credential

    cfg = load_config(config)
    credential = garden_credential(cfg)
    if credential is None:
        raise ConfigError(f"{config}: no garden credential (transport.garden_secret_file); "
                          "`envelopay init --force` adds one and keeps the keys")
    return grant(accounts, account_with(credential[0], agent_addresses(cfg), credential[1]), take=take)


def register_with_devnet(state: DevnetState, cfg: WorkerConfig, dkim_txt: str, garden_sha256: str) -> None:
    a = cfg.agent
    wallets = {acc.chain: acc.wallet for acc in cfg.accept}
    register_agent(Path(state.home), AgentEntry(
        a.address, agent_addresses(cfg), {f"{a.dkim_selector}._domainkey.{a.domain}": dkim_txt}, wallets,
        garden_sha256))


def init_devnet_agent(directory: Path, *, address: str, force: bool = False, fund: bool = True,
                      home: Path | None = None) -> tuple[InitResult, list[str]]:
    """`init --devnet`: the config for the running devnet, registered, wallets funded.
    Returns the result and one line per funded wallet."""
    where = devnet_home(home)
    state = read_state(where)
    result = init_agent(directory, address=address, force=force, devnet=state)
    lines: list[str] = []
    if fund:
        plan = plan_funding(where, address, chain=None, **DEVNET_FUNDS)
        for item in asyncio.run(give(state, plan)):
            lines.append(f"funded {funded_text(item)}")
    return result, lines
