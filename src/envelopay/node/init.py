"""`envelopay init`: write a configuration with local defaults and generate its keys."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from envelopay.config import load_config
from envelopay.errors import ConfigError, UsageError
from envelopay.mail.addresses import require_address
from envelopay.node.keys import Entropy, GeneratedKeys, evm_address, generate_keys, solana_pubkey

__all__ = ["InitResult", "init_agent", "render_config"]


@dataclass(frozen=True, slots=True)
class InitResult:
    config: Path
    solana_wallet: str
    base_wallet: str
    dkim_txt: Path


def render_config(
    *, address: str, domain: str, solana_wallet: str, base_wallet: str, dkim_txt: str = ""
) -> str:
    """The TOML `init` writes (paths relative to the config file)."""
    # One selector per agent: several agents of one garden share the domain.
    selector = re.sub(r"[^a-z0-9-]", "-", address.split("@")[0].lower()).strip("-") or "ep1"
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

# A deterministic email-as-tool endpoint inside the garden.
[[responders]]
address = "kv@{domain}"
description = "key-value lookup"
handler = "envelopay.endpoints.reference:kv_get"
schema = "envelopay.endpoints.reference:KvGet"
'''


def init_agent(
    directory: Path,
    *,
    address: str,
    force: bool = False,
    entropy: Entropy = secrets.token_bytes,
) -> InitResult:
    """Create DIRECTORY/envelopay.toml and DIRECTORY/keys/. Refuses to overwrite keys."""
    addr = require_address(address, field="--address").lower()
    domain = addr.rsplit("@", 1)[1]
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
        )
    )
    (directory / "var").mkdir(exist_ok=True)
    try:
        load_config(config)  # what we wrote must load: fail here, not at first use
    except ConfigError as exc:
        raise ConfigError(f"init wrote an invalid config: {exc}") from exc
    return InitResult(config, generated.solana_wallet, generated.base_wallet, generated.dkim_txt)
