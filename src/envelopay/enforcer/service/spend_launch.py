"""Starting the spend enforcer beside the send enforcer (`enforcer serve` options
--vault-key-file, --pay-rail, --inbox-root; the vault secret may instead come from
$ENVELOPAY_ENFORCER_VAULT_SECRET).

`prepare_spend` reads and checks everything before the service listens (None when no
spend option is given: the enforcer then serves mail only); `start_payments` opens the
payment tables and recovers every in-flight intent before the first request is served.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envelopay.dkim import DnsLookup, load_verifier, resolver_dns
from envelopay.enforcer.send.enforcer import Enforcer
from envelopay.enforcer.spend.invoices import MaildirInvoices
from envelopay.enforcer.spend.payers import make_payers
from envelopay.enforcer.spend.payments import Payments
from envelopay.enforcer.spend.payments_exec import recover
from envelopay.enforcer.spend.store import PaymentStore
from envelopay.enforcer.spend.vault import Vault, load_vault
from envelopay.errors import ConfigError
from envelopay.rails.custodial import CustodialPayer

__all__ = ["VAULT_ENV", "SpendLaunch", "prepare_spend", "start_payments"]

VAULT_ENV = "ENVELOPAY_ENFORCER_VAULT_SECRET"


@dataclass(frozen=True)
class SpendLaunch:
    vault: Vault | None
    payers: Mapping[str, CustodialPayer]
    inbox_root: Path | None
    dns: DnsLookup | None


def prepare_spend(
    *,
    vault_key_file: Path | None,
    pay_rails: Sequence[str],
    inbox_root: Path | None,
    dns: DnsLookup | None = None,
    env: Mapping[str, str] = os.environ,
) -> SpendLaunch | None:
    """`dns` is the DKIM key lookup for INVOICEs (the node's set-up: node.agent_node.dns_setup);
    DNS when not given."""
    secret = env.get(VAULT_ENV) or None
    if vault_key_file is None and secret is None and not pay_rails and inbox_root is None:
        return None
    if vault_key_file is not None and secret is not None:
        raise ConfigError(f"give --vault-key-file or ${VAULT_ENV}, not both")
    vault = None
    if vault_key_file is not None or secret is not None:
        vault = load_vault(secret=secret, key_file=vault_key_file)
    if pay_rails and vault is None:
        raise ConfigError(f"--pay-rail needs a vault: --vault-key-file or ${VAULT_ENV}")
    if inbox_root is not None:
        if not inbox_root.is_dir():
            raise ConfigError(f"--inbox-root {inbox_root} is not a directory")
        if dns is None:
            dns = resolver_dns()
    else:
        dns = None
    return SpendLaunch(vault, make_payers(pay_rails), inbox_root, dns)


async def start_payments(spend: SpendLaunch, enforcer: Enforcer) -> Payments:
    if spend.dns is not None:  # INVOICEs are checked: load the verifier now, not at the first payment
        load_verifier()  # (AgentNode.warm does the same for a serving node)
    store = PaymentStore(enforcer.store)
    await store.open()
    invoices = MaildirInvoices(spend.inbox_root) if spend.inbox_root is not None else None
    payments = Payments(enforcer, store, spend.vault, spend.payers, invoices=invoices, dns=spend.dns)
    await recover(payments)  # before serving: finish what a crash left in flight
    return payments
